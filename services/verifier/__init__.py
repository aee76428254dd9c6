"""Verifier: claim checks on the verified-only payload and the shared verifier protocol."""
