"""AutoResearch for LLM inference: shared configuration, paths and the command line."""
