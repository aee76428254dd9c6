"""The gateway: the only public entry point; runs the diagnosis graph and persists every run."""
