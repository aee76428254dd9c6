"""Persistence of sessions, runs, tool invocations and orchestration events (DESIGN §4)."""
