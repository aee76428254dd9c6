"""Gatekeeper: deterministic checks of every evidence binding against the current run (no model)."""
