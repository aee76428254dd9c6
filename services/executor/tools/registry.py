"""The one place where tools are registered: name, description, JSON argument schema, whether the
tool bears evidence, and the callable. Nothing is discovered by import side effects.

A disabled tool (a real backend is configured, but none for this tool, and its
demo source was not chosen; `backend_factory.py`) stays known by name but is not offered: it is
left out of `names()`, `specs()` and the function schemas a model sees, and asking for it raises
ToolDisabledError, a refusal (like bad arguments), never a backend failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from services.executor.tools import changes_tool, knowledge_tool, logs_tool, metrics_tool, time_tool
from services.executor.tools.backends import ToolBackends
from services.executor.tools.tool_result import (
    ToolArgumentError,
    ToolBackendError,
    ToolError,
    ToolResult,
)
from shared.core.tool_catalogue import (
    GET_CURRENT_TIME,
    LOOKUP_KNOWLEDGE,
    QUERY_CHANGES,
    QUERY_LOGS,
    QUERY_METRICS,
    GetCurrentTimeArguments,
    LookupKnowledgeArguments,
    QueryChangesArguments,
    QueryLogsArguments,
    QueryMetricsArguments,
    describe_validation_error,
)
from shared.redaction import Redactor

__all__ = [
    "ToolArgumentError",
    "ToolDisabledError",
    "ToolBackendError",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "build_default_registry",
]


class ToolDisabledError(ToolArgumentError):
    """The tool is disabled: no source is configured for it. Nothing was asked of any backend."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments_model: type[BaseModel]
    evidence_bearing: bool
    # Receives the validated arguments model; returns a ToolResult or raises ToolError.
    handler: Callable[[Any], ToolResult]
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema of the arguments

    def __post_init__(self) -> None:
        if not self.parameters:
            object.__setattr__(self, "parameters", self.arguments_model.model_json_schema())


class ToolRegistry:
    def __init__(self, redactor: Redactor | None = None) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._disabled: set[str] = set()
        # What whoever records the calls redacts them with (redacting_store.py).
        self.redactor = redactor if redactor is not None else Redactor()

    def register(self, spec: ToolSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name!r} is already registered")
        self._specs[spec.name] = spec

    def disable(self, name: str) -> None:
        """Stop offering a registered tool (see the module docstring)."""
        if name not in self._specs:
            raise ValueError(f"tool {name!r} is not registered")
        self._disabled.add(name)

    def disabled(self) -> list[str]:
        """The disabled tools, in registration order."""
        return [name for name in self._specs if name in self._disabled]

    def is_disabled(self, name: str) -> bool:
        return name in self._disabled

    def refuse_disabled(self, name: str) -> None:
        """ToolDisabledError when `name` is disabled: the caller refuses the call before it records it."""
        if name in self._disabled:
            raise ToolDisabledError(
                name, "this tool is disabled: no source is configured for it (a real backend serves the other "
                "tools and the demo estate was not chosen for this one; ATTEST_DEMO_TOOLS); nothing was queried"
            )

    def get(self, name: str) -> ToolSpec:
        self.refuse_disabled(name)
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.names())) or "none"
            raise ToolArgumentError(name, f"unknown tool; available tools: {known}")
        return spec

    def names(self) -> list[str]:
        return [name for name in self._specs if name not in self._disabled]

    def specs(self) -> list[ToolSpec]:
        return [spec for spec in self._specs.values() if spec.name not in self._disabled]

    def is_evidence_bearing(self, name: str) -> bool:
        return self.get(name).evidence_bearing

    def function_schemas(self) -> list[dict[str, Any]]:
        """The offered tools in the OpenAI function-calling shape."""
        return [
            {"type": "function", "function": {"name": s.name, "description": s.description, "parameters": s.parameters}}
            for s in self.specs()
        ]

    def invoke(self, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        """Validate `arguments` and run the tool. Bad arguments raise ToolArgumentError, backend
        failures ToolBackendError; the caller records either as an ERROR invocation."""
        spec = self.get(name)
        if arguments is not None and not isinstance(arguments, dict):
            raise ToolArgumentError(name, "invalid arguments: expected a JSON object")
        try:
            parsed = spec.arguments_model.model_validate(arguments or {})
        except ValidationError as exc:
            raise ToolArgumentError(name, describe_validation_error(exc)) from None
        try:
            return spec.handler(parsed)
        except ToolError:
            raise
        except Exception as exc:  # a backend failure becomes an observation, not a crash
            raise ToolBackendError(name, f"backend failure: {type(exc).__name__}: {str(exc)[:300]}") from exc


def build_default_registry(backends: ToolBackends) -> ToolRegistry:
    registry = ToolRegistry(backends.redactor)
    registry.register(ToolSpec(
        name=QUERY_METRICS,
        description=metrics_tool.DESCRIPTION,
        arguments_model=QueryMetricsArguments,
        evidence_bearing=True,
        handler=lambda args: metrics_tool.query_metrics(backends.metrics, args),
    ))
    registry.register(ToolSpec(
        name=QUERY_LOGS,
        description=logs_tool.DESCRIPTION,
        arguments_model=QueryLogsArguments,
        evidence_bearing=True,
        handler=lambda args: logs_tool.query_logs(backends.logs, args),
    ))
    registry.register(ToolSpec(
        name=LOOKUP_KNOWLEDGE,
        description=knowledge_tool.DESCRIPTION,
        arguments_model=LookupKnowledgeArguments,
        evidence_bearing=True,
        handler=lambda args: knowledge_tool.lookup_knowledge(backends.knowledge, args),
    ))
    registry.register(ToolSpec(
        name=QUERY_CHANGES,
        description=changes_tool.DESCRIPTION,
        arguments_model=QueryChangesArguments,
        evidence_bearing=True,
        handler=lambda args: changes_tool.query_changes(backends.changes, args),
    ))
    registry.register(ToolSpec(
        name=GET_CURRENT_TIME,
        description=time_tool.DESCRIPTION,
        arguments_model=GetCurrentTimeArguments,
        evidence_bearing=False,
        handler=lambda args: time_tool.get_current_time(backends.clock, args),
    ))
    for name in sorted(backends.disabled):
        registry.disable(name)
    return registry
