"""The executor's prompts: versioned files in `prompts/` next to this module."""

from __future__ import annotations

from pathlib import Path

from shared.prompt_files import Prompt
from shared.prompt_files import load_prompt as _load_prompt

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
EXECUTOR_PROMPT = "executor_v2"
REACT_AGENT_PROMPT = "react_agent"
DRAFT_REPAIR_PROMPT = "draft_repair"


def load_prompt(name: str = EXECUTOR_PROMPT) -> Prompt:
    return _load_prompt(PROMPT_DIR, name)
