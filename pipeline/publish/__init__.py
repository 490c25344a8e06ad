"""Publishing the validated pairs as a Hugging Face dataset (DVC stage `publish`)."""
