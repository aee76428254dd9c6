"""The single-ReAct agent's step/progress protocol and the ProgressSnapshot it yields.

A step is one round of tool calls. After observing a step's results the agent records progress
for it — `{step, tool_call_ids, observation_summary, status}` — before it may run another step
or give its final Draft. The ledger checks every record against the calls actually made and
persisted in this run:

- every field is present and typed: `step` an integer, `tool_call_ids` a non-empty list of
  non-blank strings, `observation_summary` non-blank text, `status` one of PROGRESS_STATUSES;
- `step` is the step awaiting its record (steps are recorded in order, each once);
- the ids are exactly the calls of that step: an id no call of this run has, or a call of
  another step, is refused, and no call of the step may be left out;
- `status` may not claim more than the records show: EVIDENCE_FOUND needs at least one call of
  the step that found evidence.

An invalid record is not fatal: the agent gets an INVALID_PROGRESS_PROTOCOL observation naming
the problems and what is expected, and may repair it. Each turn that breaks the protocol counts
as one violation; at `max_violations` the ledger is saturated and the agent stops in a controlled
way with stop reason PROGRESS_PROTOCOL_VIOLATED.

The agent's own `observation_summary` is kept for the conversation only. The ProgressSnapshot is
built by the system from the canonical invocations of the recorded steps (`observed_facts.py`):
verified calls only, bounded, never the agent's words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from services.executor.observed_facts import is_verified, observed_fact
from shared.core.contracts import ToolInvocation

INVALID_PROGRESS_PROTOCOL = "INVALID_PROGRESS_PROTOCOL"
# The stop reasons of RunAgentResponse are a contract with the gateway: shared/core/agent_stop_reasons.py.

PROGRESS_STATUSES = ("EVIDENCE_FOUND", "NO_EVIDENCE", "ERROR")
RECORD_FIELDS = ("step", "tool_call_ids", "observation_summary", "status")
MAX_PROTOCOL_VIOLATIONS = 3
MAX_SUMMARY_CHARS = 600
MAX_OBSERVED_FACTS = 8
MAX_PROBLEMS = 6
MAX_PROBLEM_CHARS = 200


class ProgressSnapshot(BaseModel):
    """Mirrors `attest.common.v1.ProgressSnapshot`."""

    observed_facts: list[str] = Field(default_factory=list)
    completed_checks: int = 0


@dataclass(frozen=True)
class ProgressRecord:
    step: int
    tool_call_ids: tuple[str, ...]
    observation_summary: str
    status: str


@dataclass
class ProgressCheck:
    """The outcome of one submitted record."""

    record: ProgressRecord | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.record is not None


def _problem(text: str) -> str:
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 1] + "…"


class ProgressLedger:
    """Per run of the agent: the steps, their calls, their records and the violation count."""

    def __init__(self, max_violations: int = MAX_PROTOCOL_VIOLATIONS) -> None:
        if max_violations < 1:
            raise ValueError("max_violations must be at least 1")
        self.max_violations = max_violations
        self.violations = 0
        self._calls: dict[int, list[ToolInvocation]] = {}
        self._step_of: dict[str, int] = {}
        self._records: dict[int, ProgressRecord] = {}
        self._last_step = 0

    # --- steps and calls --------------------------------------------------------------------

    def begin_step(self) -> int:
        """The number of a new step; the previous one must have been recorded (or made no call)."""
        if self.pending_step is not None:
            raise RuntimeError(f"step {self.pending_step} has no progress record yet")
        self._last_step += 1
        return self._last_step

    def add_call(self, step: int, invocation: ToolInvocation) -> None:
        self._calls.setdefault(step, []).append(invocation)
        self._step_of.setdefault(invocation.tool_call_id, step)

    @property
    def pending_step(self) -> int | None:
        """The step whose calls were made but whose progress is not recorded yet."""
        step = self._last_step
        return step if step and self._calls.get(step) and step not in self._records else None

    def calls(self) -> list[ToolInvocation]:
        return [invocation for step in sorted(self._calls) for invocation in self._calls[step]]

    def expected(self) -> dict[str, Any]:
        """What a valid record of the pending step looks like (shown to the agent to repair)."""
        step = self.pending_step
        if step is None:
            return {}
        return {"step": step, "tool_call_ids": [inv.tool_call_id for inv in self._calls[step]]}

    # --- records ----------------------------------------------------------------------------

    def submit(self, raw: Any) -> ProgressCheck:
        """Check one record (a JSON object, or its text); an accepted record is kept."""
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else None
            except ValueError:
                return ProgressCheck(problems=["the progress record is not valid JSON"])
        if not isinstance(raw, dict):
            return ProgressCheck(problems=["the progress record must be a JSON object with fields " + ", ".join(RECORD_FIELDS)])
        problems: list[str] = []
        missing = [name for name in RECORD_FIELDS if name not in raw or raw[name] is None]
        if missing:
            problems.append(f"missing field(s): {', '.join(missing)}")
        unknown = sorted(str(name) for name in raw if name not in RECORD_FIELDS)
        if unknown:
            problems.append(f"unknown field(s): {', '.join(unknown)[:100]}")
        step = raw.get("step")
        ids = raw.get("tool_call_ids")
        summary = raw.get("observation_summary")
        status = raw.get("status")
        if "step" not in missing and (not isinstance(step, int) or isinstance(step, bool)):
            problems.append("step must be an integer")
        if "tool_call_ids" not in missing and (
            not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i.strip() for i in ids)
        ):
            problems.append("tool_call_ids must be a non-empty list of non-blank strings")
        if "observation_summary" not in missing and (not isinstance(summary, str) or not summary.strip()):
            problems.append("observation_summary must be non-blank text")
        elif isinstance(summary, str) and len(summary) > MAX_SUMMARY_CHARS:
            problems.append(f"observation_summary is longer than {MAX_SUMMARY_CHARS} characters")
        if "status" not in missing and status not in PROGRESS_STATUSES:
            problems.append(f"status must be one of {', '.join(PROGRESS_STATUSES)}")
        if problems:
            return ProgressCheck(problems=[_problem(p) for p in problems][:MAX_PROBLEMS])
        # Checked above: every field is present and of its type.
        assert isinstance(step, int) and isinstance(ids, list) and isinstance(summary, str) and isinstance(status, str)
        record = ProgressRecord(step=step, tool_call_ids=tuple(ids), observation_summary=summary.strip(), status=status)
        problems = self._against_calls(record)
        if problems:
            return ProgressCheck(problems=[_problem(p) for p in problems][:MAX_PROBLEMS])
        self._records[record.step] = record
        return ProgressCheck(record=record)

    def _against_calls(self, record: ProgressRecord) -> list[str]:
        pending = self.pending_step
        if pending is None:
            return ["no step awaits a progress record: record progress only after a step's tool calls"]
        if record.step != pending:
            return [f"step {record.step} is not the step awaiting its record; record step {pending}"]
        problems: list[str] = []
        made = [inv.tool_call_id for inv in self._calls[pending]]
        for tool_call_id in dict.fromkeys(record.tool_call_ids):
            if tool_call_id not in self._step_of:
                problems.append(f"unknown tool_call_id {tool_call_id!r}: no call with this id was made in this run")
            elif self._step_of[tool_call_id] != pending:
                problems.append(f"tool_call_id {tool_call_id!r} is a call of step {self._step_of[tool_call_id]}, not of step {pending}")
        left_out = [i for i in made if i not in record.tool_call_ids]
        if left_out:
            problems.append(f"the record leaves out call(s) of step {pending}: {', '.join(left_out)}")
        if not problems and record.status == "EVIDENCE_FOUND" and not any(
            inv.evidence_status == "EVIDENCE_FOUND" for inv in self._calls[pending]
        ):
            problems.append(f"status EVIDENCE_FOUND, but no call of step {pending} found evidence")
        return problems

    # --- violations -------------------------------------------------------------------------

    def violation(self) -> None:
        """Count one turn that broke the protocol."""
        self.violations += 1

    @property
    def saturated(self) -> bool:
        return self.violations >= self.max_violations

    def invalid_observation(self, problems: list[str]) -> dict[str, Any]:
        """The INVALID_PROGRESS_PROTOCOL observation returned to the agent."""
        body: dict[str, Any] = {
            "error": INVALID_PROGRESS_PROTOCOL,
            "problems": problems[:MAX_PROBLEMS],
            "violations": self.violations,
            "max_violations": self.max_violations,
        }
        expected = self.expected()
        if expected:
            body["expected"] = {**expected, "observation_summary": "…", "status": "|".join(PROGRESS_STATUSES)}
            body["note"] = "Call record_progress for the expected step before any other tool call or the final answer."
        else:
            body["note"] = "No step awaits a record: call tools, or give the final answer."
        return body

    # --- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> ProgressSnapshot:
        """Observed facts of the verified calls of the recorded steps, in call order, bounded."""
        facts: list[str] = []
        checks = 0
        for step in sorted(self._records):
            for invocation in self._calls.get(step, []):
                if not is_verified(invocation):
                    continue
                checks += 1
                fact = observed_fact(invocation)
                if fact and fact not in facts and len(facts) < MAX_OBSERVED_FACTS:
                    facts.append(fact)
        return ProgressSnapshot(observed_facts=facts, completed_checks=checks)


# --- the protocol as a function a model can call --------------------------------------------

RECORD_PROGRESS_TOOL = "record_progress"


def record_progress_schema() -> dict[str, Any]:
    """`record_progress` in the OpenAI function-calling shape. It is part of the protocol, not a
    tool: it is never persisted as an invocation and is never evidence."""
    return {
        "type": "function",
        "function": {
            "name": RECORD_PROGRESS_TOOL,
            "description": (
                "Record the progress of the step whose tool results you have just observed, before any "
                "other tool call or the final answer. Not evidence, never cited."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "step": {"type": "integer", "minimum": 1, "description": "The number of the observed step."},
                    "tool_call_ids": {
                        "type": "array", "items": {"type": "string"}, "minItems": 1,
                        "description": "The ids of every tool call made in that step.",
                    },
                    "observation_summary": {
                        "type": "string", "maxLength": MAX_SUMMARY_CHARS,
                        "description": "What the step's results showed, in one or two sentences.",
                    },
                    "status": {"type": "string", "enum": list(PROGRESS_STATUSES)},
                },
                "required": list(RECORD_FIELDS),
                "additionalProperties": False,
            },
        },
    }
