"""The planner's prompts: versioned files in `prompts/` next to this module."""

from __future__ import annotations

from pathlib import Path

from shared.prompt_files import Prompt
from shared.prompt_files import load_prompt as _load_prompt

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
PLANNER_PROMPT = "planner"


def load_prompt(name: str = PLANNER_PROMPT) -> Prompt:
    return _load_prompt(PROMPT_DIR, name)
