"""The verifier's engines behind one interface: the embedded verifier (default, offline) and the
OpenAI-compatible model verifier (`model_verifier.py`). The servicer only sees `VerifierRun`: the
parsed output, or why there is none, plus the audit of its model calls
(`shared.model_calls.ModelCallAudit`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.grounding_overlay import Grounding
from shared.core.contracts import PromptRef, VerifierInput, VerifierOutput
from shared.model_calls import ModelCallAudit
from shared.model_client import IsActive, TimeRemaining

log = logging.getLogger(__name__)

# The graph spec's technical retry: a first attempt and one more on byte-identical input.
TECHNICAL_ATTEMPTS = 2
EMBEDDED_PROMPT = PromptRef(role="verifier", name="verifier.embedded", version="1")


@dataclass
class VerifierRun:
    """One VerifyClaims: `output` when an attempt succeeded, else `failure` says why."""

    output: VerifierOutput | None
    audit: ModelCallAudit
    failure: str = ""
    # The claims' grounding findings the engine computed (the embedded engine), for the servicer's
    # grounding pass over the same input to reuse.
    grounding: Grounding | None = None


class VerifierEngine(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def verify(
        self,
        inp: VerifierInput,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> VerifierRun: ...


class EmbeddedVerifierEngine:
    """The deterministic verifier; an unexpected error is a technical failure, tried once more."""

    provider = "embedded"
    prompt_ref = EMBEDDED_PROMPT

    def __init__(self, verifier: EmbeddedVerifier | None = None) -> None:
        self._verifier = verifier or EmbeddedVerifier()

    def verify(
        self,
        inp: VerifierInput,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> VerifierRun:
        failures: list[str] = []
        grounding = Grounding(inp)
        for attempt in range(1, TECHNICAL_ATTEMPTS + 1):
            try:
                output = self._verifier.verify(inp, grounding)
            except Exception as exc:  # noqa: BLE001 - a technical failure of this attempt
                log.warning("embedded verifier attempt %d failed: %s", attempt, exc)
                failures.append(f"attempt {attempt}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            return VerifierRun(output, ModelCallAudit.embedded(EMBEDDED_PROMPT, attempts=attempt), grounding=grounding)
        return VerifierRun(
            None, ModelCallAudit.embedded(EMBEDDED_PROMPT, attempts=TECHNICAL_ATTEMPTS), failure="; ".join(failures)
        )
