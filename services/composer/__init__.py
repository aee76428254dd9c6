"""Composer: the Chinese answer, rendered only from verifier-allowed material."""
