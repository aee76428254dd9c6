"""The one place where secrets leave a tool call: the invocation store as the
executor's ToolRunner writes through it.

Everything a tool call leaves behind is written by three calls of the store: `begin` (the request,
i.e. the call's arguments), `complete` (the result the agent reads: log lines, change records,
runbook text, metric labels) and `fail` (the error). This wrapper redacts each of them
(`shared.redaction.Redactor`) before the row is written, and the ToolInvocation the agent (and a
model) gets back is the one the store returns, built from what was written. So nothing
unredacted is persisted, shown to a model, returned by ExecutePlan or GetRun; the gatekeeper's
excerpt check reads the same redacted rows, so a citation of a redacted line still holds.
Reads (`list_for_run`, …) pass through unchanged.
"""

from __future__ import annotations

from typing import Any

from shared.core.contracts import EvidenceRef, ToolInvocation
from shared.db.invocation_store import InvocationStore
from shared.redaction import Redactor


class RedactingInvocationStore:
    """`store` with every request, result and error redacted on its way in."""

    def __init__(self, store: InvocationStore, redactor: Redactor) -> None:
        self._store = store
        self._redactor = redactor

    def begin(self, run_id: str, tool_call_id: str, tool_name: str, round_: int, request: dict[str, Any],
              *args: Any, **kwargs: Any) -> int:
        return self._store.begin(run_id, tool_call_id, tool_name, round_, self._redactor.redact_value(request),
                                 *args, **kwargs)

    def complete(self, invocation_id: int, *, agent_result: str, evidence_refs: list[EvidenceRef] | None = None,
                 **kwargs: Any) -> ToolInvocation:
        if evidence_refs is not None:
            evidence_refs = [ref.model_copy(update={"text": self._redactor.redact(ref.text)}) for ref in evidence_refs]
        return self._store.complete(invocation_id, agent_result=self._redactor.redact_json(agent_result),
                                    evidence_refs=evidence_refs, **kwargs)

    def fail(self, invocation_id: int, error: str, *args: Any, **kwargs: Any) -> ToolInvocation:
        return self._store.fail(invocation_id, self._redactor.redact(error), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
