"""One module per noise operator; importing a module registers its operator."""
