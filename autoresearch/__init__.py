"""AutoResearch for LLM inference: the command line and the workflows it runs (the app layer)."""
