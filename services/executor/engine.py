"""The executor's engines behind one interface: the embedded engine (default, offline) and the
OpenAI-compatible tool-calling agent (`openai_agent.py`). The servicer only sees `EngineRun`:
the final text plus the audit of its model calls (`shared.model_calls.ModelCallAudit`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from shared.core.contracts import Plan, PromptRef, ToolInvocation
from shared.model_calls import ModelCallAudit
from shared.model_client import IsActive, TimeRemaining

CallTool = Callable[..., ToolInvocation]
# What the embedded executor says in missing_info of the checks it did not run because the run's
# tool budget is used up (worded with no term the side-text checks would ask the evidence to show).
BUDGET_EXHAUSTED_NOTE = "本次诊断的工具调用预算已达上限，其余检查未执行，相应证据缺失。"


def budget_exhausted(call_tool: CallTool) -> bool:
    """Whether the run's budget of tool invocations or evidence is used up:
    the executor's ToolRunner then runs no further tool, and an agent stops calling them."""
    return getattr(call_tool, "exhausted", None) is not None

EMBEDDED_PROMPT = PromptRef(role="executor", name="executor.embedded", version="1")


@dataclass
class EngineRun:
    text: str
    audit: ModelCallAudit
    # Why the engine stopped: final_answer, or (openai engine) step_bound or model_error.
    stop_reason: str = "final_answer"
    # A model failure that left no final answer; the servicer reports it with the parse status.
    failure: str = ""


class ExecutorEngine(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def execute(
        self,
        plan: Plan,
        call_tool: CallTool,
        query: str,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> EngineRun: ...


class EmbeddedAgent(Protocol):
    def run(self, plan: Plan, call_tool: CallTool, query: str) -> str: ...


class EmbeddedEngine:
    """The deterministic engine (`embedded_agent.py`): no model call, one attempt, no tokens."""

    provider = "embedded"
    prompt_ref = EMBEDDED_PROMPT

    def __init__(self, agent: EmbeddedAgent) -> None:
        self._agent = agent

    def execute(
        self,
        plan: Plan,
        call_tool: CallTool,
        query: str,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> EngineRun:
        text = self._agent.run(plan, call_tool, query)
        return EngineRun(text=text, audit=ModelCallAudit.embedded(EMBEDDED_PROMPT))
