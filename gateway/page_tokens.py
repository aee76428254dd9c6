"""Opaque page tokens (GetRun's pages, ListRuns): a URL-safe base64 text of a body that names
what is paged and the key of the last item returned. A token that does not decode is refused
with the caller's error (INVALID_ARGUMENT, naming what was expected)."""

from __future__ import annotations

import base64
import binascii

from shared.errors import InvalidInput


def encode_token(body: str) -> str:
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode_token(token: str, refused: InvalidInput, max_chars: int) -> str:
    """The body of a token `encode_token` made; `refused` is raised for anything else."""
    if len(token) > max_chars:
        raise refused
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise refused from None
