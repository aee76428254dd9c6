"""The model-backed single-ReAct agent: a bounded tool-calling loop with the progress protocol.

Each model turn is one step of the budget. The model sees the versioned prompt
(`prompts/react_agent.v*.md`), the question with the embedded planner's calls as suggestions, the
evidence tools and `record_progress`. In a turn it may:

- record the progress of the step it has just observed (`record_progress`), checked by the
  ledger (`progress_protocol.py`): accepted, or answered with an INVALID_PROGRESS_PROTOCOL
  observation that says what is wrong and what is expected;
- call tools, which run as a new step only when no step awaits its record; otherwise they are
  not run and come back as INVALID_PROGRESS_PROTOCOL. Every call is persisted by `call_tool`
  under the model's own id (made unique in the run when the model's id is blank or taken);
- reply without tool calls: its final Draft, parsed strictly (`draft_parse.py`). A final answer
  while a step is unrecorded is a violation and is answered like an invalid record.

Each turn that breaks the protocol counts once; saturation stops the run with
PROGRESS_PROTOCOL_VIOLATED, an exhausted step budget with STEP_BUDGET_EXHAUSTED, the run's tool
budget used up (no further tool is run) with RUN_BUDGET_EXHAUSTED, a model that
cannot be reached with MODEL_UNAVAILABLE — all without a Draft, always with the ProgressSnapshot.
"""

from __future__ import annotations

import itertools
import json
import logging
import secrets
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from services.executor.draft_parse import draft_response_format, parse_draft_text
from services.executor.engine import CallTool, budget_exhausted
from services.executor.openai_agent import (
    MAX_CALLS_PER_TURN,
    assistant_message,
    run_model_tool_call,
    user_message,
)
from services.executor.progress_protocol import (
    MAX_PROTOCOL_VIOLATIONS,
    RECORD_PROGRESS_TOOL,
    ProgressLedger,
    record_progress_schema,
)
from services.executor.react_agent import AgentRun, new_tool_call_id
from services.executor.tools.backends import utc_now
from services.executor.tools.registry import ToolRegistry
from shared.core.agent_stop_reasons import (
    MODEL_UNAVAILABLE,
    PROGRESS_PROTOCOL_VIOLATED,
    RUN_BUDGET_EXHAUSTED,
    STEP_BUDGET_EXHAUSTED,
)
from shared.core.contracts import QuestionIntent
from shared.core.embedded_planner import EmbeddedPlanner
from shared.draft_contract import Draft
from shared.model_calls import ModelCallAudit, ModelEngine
from shared.model_client import (
    IsActive,
    ModelCallTally,
    ModelClient,
    ModelError,
    ModelReply,
    ModelToolCall,
    TimeRemaining,
    complete_with_retries,
)
from shared.prompt_files import Prompt

log = logging.getLogger(__name__)

FINAL_TURN_FIELD = "final_turn"
DEFAULT_FINAL_TURN = "Do not call any tool. Reply now with the final Draft as one JSON object only."
# Shorter than the runner's bound, so the id the model sees is the id that is stored.
MAX_TOOL_CALL_ID_CHARS = 120
MAX_DETAIL_CHARS = 300


def _dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def _with_step(observation: str, tool_call_id: str, step: int) -> str:
    """The tool observation, with the id to cite and the step to record put first."""
    try:
        body = json.loads(observation)
    except ValueError:
        body = {"result": observation}
    if not isinstance(body, dict):
        body = {"result": body}
    return _dumps({"step": step, "tool_call_id": tool_call_id, **body})


class OpenAIReactAgent(ModelEngine):
    """One instance serves concurrent runs: all per-run state lives in `run`."""

    ROLE = "executor"

    def __init__(
        self,
        client: ModelClient,
        registry: ToolRegistry,
        prompt: Prompt,
        *,
        max_attempts: int = 2,
        json_schema_format: bool = False,
        max_violations: int = MAX_PROTOCOL_VIOLATIONS,
        planner: EmbeddedPlanner | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._client = client
        self._registry = registry
        self._prompt = prompt
        self._max_attempts = max_attempts
        self._response_format = draft_response_format() if json_schema_format else None
        self._max_violations = max_violations
        self._planner = planner or EmbeddedPlanner()
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
        tally = ModelCallTally()
        ledger = ProgressLedger(self._max_violations)
        nonce = secrets.token_hex(4)
        numbers = itertools.count(1)
        taken = set(taken_tool_call_ids)
        plan = self._planner.plan(query, self._clock(), services=None if services is None else list(services),
                                  intent=intent)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": (
                f"{user_message(plan, query)}\n"
                f"Step budget: {max_steps} turns. Protocol violations before the diagnosis ends: {self._max_violations}."
            )},
        ]
        tools = [*self._registry.function_schemas(), record_progress_schema()]

        def finish(draft: Draft | None, stop_reason: str = "", detail: str = "") -> AgentRun:
            return AgentRun(
                draft=draft, progress=ledger.snapshot(), tool_call_ids=[inv.tool_call_id for inv in ledger.calls()],
                audit=ModelCallAudit.of_calls(self.prompt_ref, self._client, tally),
                stop_reason=stop_reason, draft_parse_detail=detail[:MAX_DETAIL_CHARS],
            )

        def turn(**kwargs: Any) -> ModelReply:
            # A caller gone before or during the turn raises shared.errors.Cancelled.
            return complete_with_retries(
                self._client, messages, tally=tally, max_attempts=self._max_attempts,
                time_remaining=time_remaining, is_active=is_active, **kwargs,
            )

        try:
            for _ in range(max_steps):
                reply = turn(tools=tools)
                calls = self._unique_ids(reply.tool_calls, taken, nonce, numbers)
                messages.append(assistant_message(reply, calls))
                if not calls:
                    if ledger.pending_step is not None:
                        ledger.violation()
                        if ledger.saturated:
                            return finish(None, PROGRESS_PROTOCOL_VIOLATED)
                        problem = f"step {ledger.pending_step} has no progress record: the final answer must wait for it"
                        messages.append({"role": "user", "content": _dumps(ledger.invalid_observation([problem]))})
                        continue
                    return self._final(reply, messages, turn, finish)
                if not self._run_turn(calls, messages, ledger, call_tool):
                    return finish(None, PROGRESS_PROTOCOL_VIOLATED)
                if budget_exhausted(call_tool):
                    # Like the step bound: a controlled stop, released from the verified progress.
                    return finish(None, RUN_BUDGET_EXHAUSTED, "the run's budget of tool calls is used up")
            return finish(None, STEP_BUDGET_EXHAUSTED)
        except ModelError as error:
            log.warning("react agent model call failed: %s", error)
            return finish(None, MODEL_UNAVAILABLE, f"model call failed: {type(error).__name__}: {error}")

    def _final(self, reply: ModelReply, messages: list[dict[str, Any]], turn: Callable[..., ModelReply],
               finish: Callable[..., AgentRun]) -> AgentRun:
        """The final Draft; a server that can constrain output to a schema is asked once more,
        without tools, for the Draft in that form."""
        content = reply.content
        if self._response_format is not None:
            messages.append({"role": "user", "content": self._prompt.fields.get(FINAL_TURN_FIELD, DEFAULT_FINAL_TURN)})
            content = turn(response_format=self._response_format).content
        draft, detail = parse_draft_text(content)
        return finish(draft, "", detail)

    @staticmethod
    def _unique_ids(calls: list[ModelToolCall], taken: set[str], nonce: str,
                    numbers: itertools.count[int]) -> list[ModelToolCall]:
        """The model's calls with ids that are non-blank and unique in the run."""
        unique: list[ModelToolCall] = []
        for call in calls:
            tool_call_id = call.id.strip()[:MAX_TOOL_CALL_ID_CHARS]
            if not tool_call_id or tool_call_id in taken:
                tool_call_id = new_tool_call_id(nonce, next(numbers), taken)
            taken.add(tool_call_id)
            unique.append(ModelToolCall(tool_call_id, call.name, call.arguments_json))
        return unique

    def _run_turn(self, calls: list[ModelToolCall], messages: list[dict[str, Any]], ledger: ProgressLedger,
                  call_tool: CallTool) -> bool:
        """Records first, then the tool calls as a new step if no step awaits its record.
        Appends one tool message per call; False when the ledger is saturated."""
        contents: dict[str, str] = {}
        problems: dict[str, list[str]] = {}
        for call in calls:
            if call.name == RECORD_PROGRESS_TOOL:
                check = ledger.submit(call.arguments_json)
                if check.accepted:
                    assert check.record is not None  # an accepted submission is a record
                    contents[call.id] = _dumps({"status": "RECORDED", "step": check.record.step})
                else:
                    problems[call.id] = check.problems
        actions = [call for call in calls if call.name != RECORD_PROGRESS_TOOL]
        blocked = bool(actions) and ledger.pending_step is not None
        if blocked:
            reason = f"not run: step {ledger.pending_step} has no valid progress record yet"
            problems.update({call.id: [reason] for call in actions})
        if problems:
            ledger.violation()
            if ledger.saturated:
                return False
            for call_id, found in problems.items():
                contents[call_id] = _dumps(ledger.invalid_observation(found))
        if actions and not blocked:
            step = ledger.begin_step()
            for k, call in enumerate(actions):
                if k >= MAX_CALLS_PER_TURN:
                    contents[call.id] = _dumps({"error": f"not run: at most {MAX_CALLS_PER_TURN} tool calls per step"})
                    continue
                invocation, observation = run_model_tool_call(call, call_tool, self._registry)
                if invocation is not None:
                    ledger.add_call(step, invocation)
                contents[call.id] = _with_step(observation, call.id, step)
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": contents[call.id]})
        return True
