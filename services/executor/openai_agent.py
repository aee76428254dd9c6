"""The OpenAI-compatible executor engine: a bounded tool-calling loop over the tool registry.

The model sees the versioned system prompt and a user message with the question and the plan's
calls as suggestions. Every tool call it makes goes through `call_tool`, which persists the
invocation before the result is used; the observation shown back carries the invocation id, the
evidence status and each evidence ref's raw_path and text (bounded, most telling refs first), so
the model can cite exactly what the gatekeeper will check. Bad arguments come back as an error
observation. After `max_tool_steps` tool-calling turns the model is asked once, without tools, for
its final answer. The final assistant content is returned as is: nothing here repairs or trusts
it (graph spec, "Structured Executor output SHALL degrade safely"). The servicer checks its
citations against this run's invocations (`citation_self_check.py`: an excerpt the gatekeeper
would refuse is replaced by a verbatim one of the same ref, an uncitable binding is dropped) and
then parses it strictly.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from services.executor.answer_schema import executor_response_format
from services.executor.engine import CallTool, EngineRun, budget_exhausted
from services.executor.evidence_salience import rank_refs
from services.executor.tools.registry import ToolRegistry
from shared.config import configured_failure_modes
from shared.core.contracts import Plan, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import point_values, read_result
from shared.errors import ResourceExhausted
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

MAX_CALLS_PER_TURN = 8
MAX_OBSERVATION_CHARS = 8000
MAX_REFS_SHOWN = 60
MAX_REF_TEXT_SHOWN = 500
MAX_ERROR_CHARS = 500
MAX_TOOL_NAME_CHARS = 100
MAX_RAW_ARGUMENTS_CHARS = 500
MAX_QUERY_CHARS = 2000
FINAL_TURN_FIELD = "final_turn"
DEFAULT_FINAL_TURN = "Do not call tools. Reply now with the final JSON object only."
# Said to a model whose run has used up its tool budget, before its final turn.
BUDGET_EXHAUSTED_TURN = ("This diagnosis has used up its budget of tool calls: no further tool can be run. "
                         "Answer only from the evidence already returned, and name every check you could not "
                         "run in missing_info.")
BUDGET_EXHAUSTED_OBSERVATION = ("not run: this diagnosis has used up its budget of tool calls; answer with the "
                                "evidence already returned and name what is missing")


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def user_message(plan: Plan, query: str) -> str:
    """The question and the plan's calls, as suggestions the model may follow or adjust."""
    lines = [f"Question: {_bounded(query, MAX_QUERY_CHARS)}"]
    if plan.services:
        lines.append(f"Services: {', '.join(plan.services)}")
    if plan.window:
        lines.append(f"Time window (UTC): {plan.window.start} .. {plan.window.end}")
    if plan.steps:
        lines.append("Suggested tool calls:")
        for number, step in enumerate(plan.steps, start=1):
            arguments = json.dumps(step.arguments, ensure_ascii=False, sort_keys=True, default=str)
            purpose = f"  ({step.purpose})" if step.purpose else ""
            lines.append(f"{number}. {step.tool_name} {arguments}{purpose}")
    else:
        lines.append("Suggested tool calls: none")
    if plan.missing_context:
        lines.append(f"Context the question lacks: {', '.join(plan.missing_context)}")
    # The ids a typed action or a cause's mechanism may name (docs/statements.md).
    lines.append("Failure-mode catalogue (mechanism id, name: its actions by kind and index):")
    lines += configured_failure_modes().action_listing()
    return "\n".join(lines)


def tool_observation(invocation: ToolInvocation, *, evidence_bearing: bool, note: str = "") -> str:
    """What the model sees of one persisted invocation: id, status and the refs it may cite."""
    body: dict[str, Any] = {"invocation_id": invocation.invocation_id, "tool_name": invocation.tool_name}
    if invocation.lifecycle != "READY" or invocation.evidence_status == "ERROR":
        body["evidence_status"] = "ERROR"
        body["error"] = _bounded(note or invocation.error or "the call failed", MAX_ERROR_CHARS)
        body["note"] = "The call failed: nothing here is evidence. Fix the arguments or report the gap in missing_info."
        return json.dumps(body, ensure_ascii=False)
    if not evidence_bearing:
        body["result"] = _bounded(invocation.agent_result or "", MAX_OBSERVATION_CHARS // 2)
        body["note"] = "Helper result: not evidence, never cite it."
        return json.dumps(body, ensure_ascii=False)
    body["evidence_status"] = invocation.evidence_status
    refs = evidence_view(invocation).refs()  # what a model is shown: the whole view, rendered
    if invocation.retrieval_details and invocation.retrieval_details.deduped:
        body["deduped"] = True
        body["note"] = "Already returned earlier in this diagnosis: no new evidence."
    shown: list[tuple[int, dict[str, str]]] = []
    size = len(json.dumps(body, ensure_ascii=False)) + 120
    for item in rank_refs(refs, point_values(read_result(invocation.tool_name, invocation.agent_result))):
        if len(shown) >= MAX_REFS_SHOWN:
            break
        entry = {"raw_path": item.ref.raw_path, "text": _bounded(item.ref.text, MAX_REF_TEXT_SHOWN)}
        entry_size = len(json.dumps(entry, ensure_ascii=False)) + 2
        if size + entry_size > MAX_OBSERVATION_CHARS:
            continue  # a smaller, less telling ref may still fit
        shown.append((item.position, entry))
        size += entry_size
    body["evidence_refs"] = [entry for _, entry in sorted(shown, key=lambda pair: pair[0])]
    if len(shown) < len(refs):
        body["refs_shown"] = f"{len(shown)} of {len(refs)} (the most telling; narrow the query to see others)"
    return json.dumps(body, ensure_ascii=False)


def assistant_message(reply: ModelReply, calls: list[ModelToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json}}
            for call in calls
        ]
    return message


class OpenAIExecutorAgent(ModelEngine):
    """One instance serves concurrent runs: all per-run state lives in `execute`."""

    ROLE = "executor"

    def __init__(
        self,
        client: ModelClient,
        registry: ToolRegistry,
        prompt: Prompt,
        max_tool_steps: int,
        *,
        max_attempts: int = 2,
        json_schema_format: bool = False,
    ) -> None:
        if max_tool_steps < 1:
            raise ValueError("max_tool_steps must be at least 1")
        self._client = client
        self._registry = registry
        self._prompt = prompt
        self._max_tool_steps = max_tool_steps
        self._max_attempts = max_attempts
        self._response_format = executor_response_format() if json_schema_format else None

    def run(self, plan: Plan, call_tool: CallTool, query: str) -> str:
        """Same interface as the embedded agent: the executor's final text."""
        return self.execute(plan, call_tool, query).text

    def execute(
        self,
        plan: Plan,
        call_tool: CallTool,
        query: str,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> EngineRun:
        tally = ModelCallTally()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": user_message(plan, query)},
        ]
        tools = self._registry.function_schemas()

        def finish(text: str, stop_reason: str, failure: str = "") -> EngineRun:
            return EngineRun(
                text=text,
                audit=ModelCallAudit.of_calls(self.prompt_ref, self._client, tally),
                stop_reason=stop_reason,
                failure=failure,
            )

        last_content = ""  # the latest assistant text, returned if the final turn cannot be had

        def turn(**kwargs: Any) -> ModelReply:
            nonlocal last_content
            # A caller gone before or during the turn raises shared.errors.Cancelled.
            reply = complete_with_retries(
                self._client, messages, tally=tally, max_attempts=self._max_attempts,
                time_remaining=time_remaining, is_active=is_active, **kwargs,
            )
            last_content = reply.content or last_content
            return reply

        def final_turn(stop_reason: str) -> EngineRun:
            """One request without tools for the final answer (schema-constrained if supported)."""
            messages.append({"role": "user", "content": self._prompt.fields.get(FINAL_TURN_FIELD, DEFAULT_FINAL_TURN)})
            reply = turn(response_format=self._response_format)
            return finish(reply.content or "", stop_reason)

        try:
            for _ in range(self._max_tool_steps):
                reply = turn(tools=tools)
                if not reply.tool_calls:
                    if self._response_format is None:
                        return finish(reply.content or "", "final_answer")
                    # The server can constrain the answer to the schema: ask for it in that form.
                    messages.append(assistant_message(reply, []))
                    return final_turn("final_answer")
                self._run_tool_calls(reply, messages, call_tool)
                if budget_exhausted(call_tool):
                    messages.append({"role": "user", "content": BUDGET_EXHAUSTED_TURN})
                    return final_turn("budget_exhausted")
            return final_turn("step_bound")
        except ModelError as error:
            log.warning("executor model call failed: %s", error)
            failure = f"model call failed: {type(error).__name__}: {_bounded(str(error), 300)}"
            return finish(last_content, "model_error", failure)

    def _run_tool_calls(self, reply: ModelReply, messages: list[dict[str, Any]], call_tool: CallTool) -> None:
        calls = [
            ModelToolCall(call.id or f"call_{len(messages)}_{k}", call.name, call.arguments_json)
            for k, call in enumerate(reply.tool_calls)
        ]
        messages.append(assistant_message(reply, calls))
        for k, call in enumerate(calls):
            if k >= MAX_CALLS_PER_TURN:
                content = json.dumps({
                    "error": f"not run: at most {MAX_CALLS_PER_TURN} tool calls per turn",
                }, ensure_ascii=False)
            else:
                content = self._observe(call, call_tool)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})

    def _observe(self, call: ModelToolCall, call_tool: CallTool) -> str:
        return run_model_tool_call(call, call_tool, self._registry)[1]


def run_model_tool_call(
    call: ModelToolCall, call_tool: CallTool, registry: ToolRegistry
) -> tuple[ToolInvocation | None, str]:
    """Run one tool call a model asked for through `call_tool` (which persists it under the
    model's id) and return the invocation (None if it could not even be recorded) with the
    observation shown back to the model. Bad arguments become an ERROR invocation whose
    observation says what to fix."""
    name = call.name[:MAX_TOOL_NAME_CHARS]
    note = ""
    arguments: Any
    try:
        arguments = json.loads(call.arguments_json) if call.arguments_json.strip() else {}
    except ValueError as exc:
        arguments = call.arguments_json[:MAX_RAW_ARGUMENTS_CHARS]
        note = f"arguments are not valid JSON ({exc}); send one JSON object matching the tool's schema"
    if not note and not isinstance(arguments, dict):
        note = f"arguments must be a JSON object, got {type(arguments).__name__}"
    try:
        invocation = call_tool(name, arguments, tool_call_id=call.id)
    except ResourceExhausted:
        return None, json.dumps({"tool_name": name, "error": BUDGET_EXHAUSTED_OBSERVATION})
    except Exception as exc:  # the call could not even be recorded: say so, do not crash
        log.exception("tool call %s could not be run", name)
        return None, json.dumps({"tool_name": name, "error": f"the call could not be run: {type(exc).__name__}"})
    try:
        evidence_bearing = registry.is_evidence_bearing(invocation.tool_name)
    except Exception:  # an unknown tool: its (failed) invocation is shown as an error
        evidence_bearing = True
    if note and invocation.error:
        note = f"{note}: {invocation.error}"
    return invocation, tool_observation(invocation, evidence_bearing=evidence_bearing, note=note)
