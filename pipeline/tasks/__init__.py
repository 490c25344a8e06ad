"""Clinical task templates (YAML under templates/) and the `tasks` stage that samples and answers them."""
