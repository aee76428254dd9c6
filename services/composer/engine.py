"""The composer's engines behind one interface: the fixed templates (default, offline) and the
OpenAI-compatible model composer (`model_composer.py`), whose output is checked and replaced by
the template when it fails. The servicer only sees `ComposeRun`: the output plus the audit of
its model calls (`shared.model_calls.ModelCallAudit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.core.contracts import ComposerInput, ComposerOutput, PromptRef
from shared.core.templates import compose_answer
from shared.model_calls import ModelCallAudit
from shared.model_client import IsActive, TimeRemaining

TEMPLATES_PROMPT = PromptRef(role="composer", name="composer.templates", version="1")


@dataclass
class ComposeRun:
    output: ComposerOutput
    audit: ModelCallAudit


class Composer(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def compose(
        self,
        inp: ComposerInput,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> ComposeRun: ...


class TemplateComposer:
    """The fixed templates: no model, one attempt, the same answer for the same input."""

    provider = "embedded"
    prompt_ref = TEMPLATES_PROMPT

    def compose(
        self,
        inp: ComposerInput,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> ComposeRun:
        return ComposeRun(compose_answer(inp), ModelCallAudit.embedded(TEMPLATES_PROMPT))
