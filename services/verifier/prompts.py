"""The verifier's prompts: versioned files in `prompts/` next to this module."""

from __future__ import annotations

from pathlib import Path

from shared.prompt_files import Prompt
from shared.prompt_files import load_prompt as _load_prompt

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
VERIFIER_PROMPT = "verifier_v2"
SEMANTIC_GUARD_PROMPT = "semantic_guard"


def load_prompt(name: str) -> Prompt:
    return _load_prompt(PROMPT_DIR, name)
