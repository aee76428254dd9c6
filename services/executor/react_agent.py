"""The single-ReAct diagnosis agent: one interface, an embedded and a model-backed implementation.

Spec `single-react-evidence-semantic-guards.md`; DESIGN §1 (single-ReAct mode). The agent runs
steps — tool calls through the persisting `ToolRunner`, each stored under the agent's own
`tool_call_id` — keeps the step/progress protocol (`progress_protocol.py`), and ends with one of:

- a Draft (stop reason ""), or no Draft when the final answer failed strict parsing
  (`draft_parse_detail` says why; stop reason "");
- a controlled stop without a Draft: STEP_BUDGET_EXHAUSTED (the step bound was reached),
  RUN_BUDGET_EXHAUSTED (the run's budget of tool invocations or evidence is used up),
  PROGRESS_PROTOCOL_VIOLATED (protocol violations saturated), MODEL_UNAVAILABLE (the model could
  not be reached within its attempts).

In every case the ProgressSnapshot of the verified calls of the recorded steps is returned, so
that Release can publish the completed checks and nothing else.

The embedded agent (this module) picks its actions with the embedded planner — one tool call per
step, in the plan's order, then one step per call for the dependencies its error lines name
(`dependency_follow.py`, within the steps left) — records its progress after each observation,
and derives its Draft from the evidence with the embedded executor agent's findings
(`embedded_draft.py`). A question that names no service ends at once: no tool call, no
conclusion, the missing context named. The model-backed agent is `react_model_agent.py`.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from services.executor.citation_self_check import check_output, log_report
from services.executor.dependency_follow import follow_dependencies
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.embedded_draft import draft_from_evidence, missing_service_draft
from services.executor.engine import CallTool
from services.executor.observed_facts import observed_fact
from services.executor.progress_protocol import ProgressLedger, ProgressSnapshot
from services.executor.tools.backends import utc_now
from shared.core.agent_stop_reasons import RUN_BUDGET_EXHAUSTED, STEP_BUDGET_EXHAUSTED
from shared.core.contracts import MissingInfo, PromptRef, QuestionIntent, ToolInvocation
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.question_intent import classify_question
from shared.draft_contract import Draft
from shared.errors import ResourceExhausted
from shared.model_calls import ModelCallAudit
from shared.model_client import IsActive, TimeRemaining

EMBEDDED_REACT_PROMPT = PromptRef(role="executor", name="react_agent.embedded", version="1")
# When the request leaves max_steps at 0; requests above MAX_AGENT_STEPS are refused.
DEFAULT_AGENT_STEPS = 20
MAX_AGENT_STEPS = 50
MAX_ERROR_CHARS = 200


@dataclass
class AgentRun:
    """What one RunAgent produced (mirrors RunAgentResponse, plus the audit of the model calls)."""

    draft: Draft | None
    progress: ProgressSnapshot
    tool_call_ids: list[str]
    audit: ModelCallAudit
    stop_reason: str = ""
    draft_parse_detail: str = ""


class ReactAgent(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def run(
        self,
        query: str,
        call_tool: CallTool,
        *,
        max_steps: int,
        taken_tool_call_ids: Collection[str] = (),
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
        services: Sequence[str] | None = None,
        intent: QuestionIntent | None = None,
    ) -> AgentRun:
        """`call_tool(name, arguments, tool_call_id=…)` persists and runs one call;
        `taken_tool_call_ids` are ids the run already has (never reused, so that every reference
        resolves to exactly one invocation); `services`, when given, are the services to check
        (the question's, resolved against the backends' catalogue and bounded), spelled as the
        catalogue spells them; `intent`: what the question asks for (RunAgentRequest.intent), read
        from `query` when not given."""
        ...


def new_tool_call_id(nonce: str, number: int, taken: Collection[str]) -> str:
    """A tool_call_id unique in the run: a per-agent-run nonce and a counter."""
    candidate = f"call_{nonce}_{number}"
    while candidate in taken:
        candidate = f"call_{secrets.token_hex(4)}_{number}"
    return candidate


def step_status(invocations: list[ToolInvocation]) -> str:
    """The honest status of a step: EVIDENCE_FOUND if any call found evidence, ERROR if every
    call failed, else NO_EVIDENCE (a helper call is no evidence)."""
    if any(inv.evidence_status == "EVIDENCE_FOUND" for inv in invocations):
        return "EVIDENCE_FOUND"
    if invocations and all(inv.lifecycle == "ERROR" or inv.evidence_status == "ERROR" for inv in invocations):
        return "ERROR"
    return "NO_EVIDENCE"


class EmbeddedReactAgent:
    """Deterministic, offline; one instance serves concurrent runs (no per-run state on self)."""

    provider = "embedded"
    prompt_ref = EMBEDDED_REACT_PROMPT

    def __init__(
        self,
        planner: EmbeddedPlanner | None = None,
        findings: EmbeddedExecutorAgent | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._planner = planner or EmbeddedPlanner()
        self._findings = findings or EmbeddedExecutorAgent()
        self._clock = clock

    def run(
        self,
        query: str,
        call_tool: CallTool,
        *,
        max_steps: int,
        taken_tool_call_ids: Collection[str] = (),
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
        services: Sequence[str] | None = None,
        intent: QuestionIntent | None = None,
    ) -> AgentRun:
        intent = intent or classify_question(query)
        plan = self._planner.plan(query, self._clock(), services=None if services is None else list(services),
                                  intent=intent)
        ledger = ProgressLedger()

        def finish(draft: Draft | None, stop_reason: str = "") -> AgentRun:
            return AgentRun(
                draft=draft, progress=ledger.snapshot(), tool_call_ids=[inv.tool_call_id for inv in ledger.calls()],
                audit=ModelCallAudit.embedded(EMBEDDED_REACT_PROMPT), stop_reason=stop_reason,
            )

        if "service" in plan.missing_context or not plan.services:
            return finish(missing_service_draft())
        if "window" in plan.missing_context:
            # The question's window lies wholly in the future: nothing to check there.
            return finish(Draft(conclusion=None, missing_context=["window"]))

        nonce = secrets.token_hex(4)
        taken = set(taken_tool_call_ids)
        invocations: list[ToolInvocation] = []
        unfinished: list[MissingInfo] = []
        planned = [(s.tool_name, dict(s.arguments)) for s in plan.steps]
        queue: deque[tuple[str, dict[str, Any]]] = deque(planned)
        steps = 0
        followed = zoomed = events_read = changes_read = False
        while queue or not followed or not zoomed or not events_read or not changes_read:
            if not queue and not followed:
                # After the plan's steps, the catalogued services its error
                # lines name, in the steps that are left (a dependency that does not fit is named
                # as not checked; following never exhausts the budget).
                followed = True
                dependencies = follow_dependencies(planned, invocations, call_tool, max_calls=max_steps - steps)
                queue.extend(dependencies.calls)
                unfinished += dependencies.missing_info
                continue
            if not queue and not zoomed:
                # Then the metrics of a service whose series was already high at the window's start,
                # from further back (where the move began), in the steps that are left.
                zoomed = True
                queue.extend(self._findings.zoom_out_reads(plan, planned, invocations, query)[: max(0, max_steps - steps)])
                continue
            if not queue and not events_read:
                # Then one read of every level around each onset (events), in the steps that are left.
                events_read = True
                queue.extend(self._findings.event_reads(plan, planned, invocations, query)[: max(0, max_steps - steps)])
                continue
            if not queue:
                # Then the error lines around each change before an onset (what started after it).
                changes_read = True
                queue.extend(self._findings.change_reads(plan, planned, invocations, query)[: max(0, max_steps - steps)])
                continue
            if steps >= max_steps:
                return finish(None, STEP_BUDGET_EXHAUSTED)
            steps += 1
            tool_name, arguments = queue.popleft()
            step = ledger.begin_step()
            tool_call_id = new_tool_call_id(nonce, step, taken)
            taken.add(tool_call_id)
            try:
                invocation = call_tool(tool_name, arguments, tool_call_id=tool_call_id)
            except ResourceExhausted:
                if events_read:
                    break  # an event read (the last calls): the budget ends the reads, not the answer
                # The run's budget is used up: no further call. Like the step bound, a controlled
                # stop: the release publishes what the recorded steps verified (the spec's handled
                # budget termination).
                return finish(None, RUN_BUDGET_EXHAUSTED)
            except Exception as exc:  # the call was never recorded: say so (not why: internals), go on
                unfinished.append(MissingInfo(text=f"{tool_name} 调用未完成（{type(exc).__name__}），相应证据缺失。", tool_name=tool_name))
                continue
            invocations.append(invocation)
            ledger.add_call(step, invocation)
            summary = observed_fact(invocation) or (
                f"{tool_name} 调用失败：{(invocation.error or '未知错误')[:MAX_ERROR_CHARS]}"
                if invocation.lifecycle == "ERROR" else f"{tool_name} 没有可陈述为事实的结果。"
            )
            check = ledger.submit({
                "step": step, "tool_call_ids": [tool_call_id], "observation_summary": summary,
                "status": step_status([invocation]),
            })
            if not check.accepted:  # a defect here, not an agent's mistake: fail loudly
                raise RuntimeError(f"the embedded agent's progress record was refused: {check.problems}")

        output = self._findings.derive(plan, invocations, query)
        output, report = check_output(output, invocations)  # no finding rests on a citation we would refuse
        log_report(report)
        output.missing_info = unfinished + output.missing_info
        return finish(draft_from_evidence(output, invocations, query, intent))

