"""The composer's engines behind one interface: the fixed templates (default, offline) and the
OpenAI-compatible model composer (`model_composer.py`), whose output is checked and replaced by
the template when it fails. The servicer only sees `ComposeRun`: the output plus what the audit
needs (prompt name/version, provider, model, attempts, tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from shared.contracts import ComposerInput, ComposerOutput, PromptRef, TokenUsage
from shared.core.templates import compose_answer

TimeRemaining = Callable[[], float | None]
IsActive = Callable[[], bool]
TEMPLATES_PROMPT = PromptRef(role="composer", name="composer.templates", version="1")


@dataclass
class ComposeRun:
    output: ComposerOutput
    prompt: PromptRef
    provider: str
    model: str
    attempts: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)


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
        return ComposeRun(compose_answer(inp), TEMPLATES_PROMPT, "embedded", TEMPLATES_PROMPT.name, attempts=1)
