"""The one seam through which a role calls a model (DESIGN §5, STYLE "Agents, prompts and tools").

`OpenAIChatClient` speaks to any OpenAI-compatible `/v1/chat/completions` endpoint through the
`openai` package: one HTTP request per `complete()` (the package's own retries are off, so every
attempt is counted here), a timeout on every call, errors classified into retryable
(`ModelTransportError`, `ModelTimeoutError`) and final ones, and one OpenTelemetry span per call
with the GenAI semantic-convention attributes. Spans carry model names, token counts and finish
reasons — never prompt or completion text.

`complete_with_retries` is the single retry rule roles share: retry only what is retryable,
never past the caller's remaining time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

import openai
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.config import ModelSettings
from shared.contracts import TokenUsage

# Below this many seconds of caller budget a model call is not started: it could not finish.
MIN_CALL_SECONDS = 0.2
_PLACEHOLDER_API_KEY = "not-needed"  # local OpenAI-compatible servers ignore the key


class ModelToolCall(NamedTuple):
    """A tool call as the model asked for it; `arguments_json` is the model's raw text."""

    id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class ModelReply:
    content: str | None
    tool_calls: list[ModelToolCall] = field(default_factory=list)
    finish_reason: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str = ""  # as the response names it


class ModelError(Exception):
    """A model call that produced no reply."""

    retryable = False


class ModelTransportError(ModelError):
    """Connection failure, 5xx or 429: another attempt may succeed."""

    retryable = True


class ModelTimeoutError(ModelError):
    """No reply within the call's timeout: another attempt may succeed."""

    retryable = True


class ModelRequestError(ModelError):
    """The server refused the request (4xx other than 408/429): repeating it cannot help."""


class ModelResponseError(ModelError):
    """The server answered with something that is not a chat completion."""


class ModelClient(Protocol):
    """What a role needs from a model; the embedded engines need none of it."""

    provider: str
    model: str

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> ModelReply: ...


def classify_openai_error(exc: Exception) -> ModelError:
    """Map an `openai` exception onto the retryable / final classes above."""
    if isinstance(exc, openai.APITimeoutError):
        return ModelTimeoutError(f"model call timed out: {exc}")
    if isinstance(exc, openai.APIConnectionError):
        return ModelTransportError(f"model endpoint unreachable: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        text = f"model endpoint answered HTTP {status}: {str(exc)[:300]}"
        if status >= 500 or status in (408, 409, 429):
            return ModelTransportError(text)
        return ModelRequestError(text)
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelResponseError(f"model response is not a chat completion: {str(exc)[:300]}")
    return ModelResponseError(f"{type(exc).__name__}: {str(exc)[:300]}")


def _server_attributes(base_url: str | None) -> dict[str, Any]:
    if not base_url:
        return {}
    parts = urlsplit(base_url)
    attributes: dict[str, Any] = {}
    if parts.hostname:
        attributes["server.address"] = parts.hostname
    if parts.port:
        attributes["server.port"] = parts.port
    return attributes


class OpenAIChatClient:
    """`ModelClient` over the `openai` package; one instance per role, safe across threads."""

    provider = "openai"

    def __init__(self, settings: ModelSettings, *, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.settings = settings
        self.model = settings.model
        api_key = settings.api_key.get_secret_value() if settings.api_key else _PLACEHOLDER_API_KEY
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=settings.base_url,
            timeout=settings.timeout_seconds,
            max_retries=0,  # attempts are counted and bounded by the caller
        )
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("attest.model_client")

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> ModelReply:
        call_timeout = self.settings.timeout_seconds if timeout is None else min(timeout, self.settings.timeout_seconds)
        if call_timeout < MIN_CALL_SECONDS:
            raise ModelTimeoutError("no time left for a model call")
        request: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": self.settings.max_tokens,
            "temperature": self.settings.temperature,
            "timeout": call_timeout,
        }
        if tools:
            request["tools"] = list(tools)
        if response_format is not None:
            request["response_format"] = response_format
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": self.model,
            "gen_ai.request.max_tokens": self.settings.max_tokens,
            "gen_ai.request.temperature": self.settings.temperature,
            **_server_attributes(self.settings.base_url),
        }
        with self._tracer.start_as_current_span(
            f"chat {self.model}", kind=SpanKind.CLIENT, attributes=attributes, record_exception=False
        ) as span:
            try:
                completion = self._client.chat.completions.create(**request)
            except openai.OpenAIError as exc:
                error = classify_openai_error(exc)
                span.set_attribute("error.type", type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise error from exc
            try:
                reply = _reply_from(completion)
            except ModelResponseError as error:
                span.set_attribute("error.type", type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise
            span.set_attribute("gen_ai.response.model", reply.model)
            if getattr(completion, "id", None):
                span.set_attribute("gen_ai.response.id", str(completion.id))
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
            span.set_attribute("gen_ai.usage.input_tokens", reply.usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", reply.usage.completion_tokens)
            span.set_attribute("attest.model.tool_calls", len(reply.tool_calls))
            return reply


def client_for(settings: ModelSettings, tracer_provider: trace.TracerProvider | None = None) -> OpenAIChatClient | None:
    """The model client a role's settings ask for: an OpenAI-compatible client, or None for the
    embedded engines (which need no network)."""
    if settings.provider != "openai":
        return None
    return OpenAIChatClient(settings, tracer_provider=tracer_provider)


def _reply_from(completion: Any) -> ModelReply:
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ModelResponseError("the completion has no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise ModelResponseError("the first choice has no message")
    calls: list[ModelToolCall] = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        if function is None:  # a non-function (custom) tool call: none are offered
            calls.append(ModelToolCall(str(getattr(call, "id", "") or ""), str(getattr(call, "type", "")), ""))
            continue
        calls.append(ModelToolCall(str(call.id or ""), str(function.name or ""), str(function.arguments or "")))
    usage = getattr(completion, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    total_tokens = int(getattr(usage, "total_tokens", 0) or 0) or prompt_tokens + completion_tokens
    return ModelReply(
        content=message.content,
        tool_calls=calls,
        finish_reason=str(choice.finish_reason or ""),
        usage=TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=total_tokens),
        model=str(getattr(completion, "model", "") or ""),
    )


@dataclass
class ModelCallTally:
    """What a role's model calls cost, for `ModelCallInfo`: HTTP attempts and summed token usage."""

    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    response_model: str = ""

    def add(self, reply: ModelReply) -> None:
        self.prompt_tokens += reply.usage.prompt_tokens
        self.completion_tokens += reply.usage.completion_tokens
        self.total_tokens += reply.usage.total_tokens
        if reply.model:
            self.response_model = reply.model

    @property
    def usage(self) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens, total_tokens=self.total_tokens
        )


def complete_with_retries(
    client: ModelClient,
    messages: Sequence[dict[str, Any]],
    *,
    tally: ModelCallTally,
    max_attempts: int,
    time_remaining: Callable[[], float | None] | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
) -> ModelReply:
    """One model turn: up to `max_attempts` technical attempts on byte-identical input, retrying
    only retryable errors; each call's timeout never exceeds the caller's remaining time."""
    last_error: ModelError | None = None
    for _ in range(max(1, max_attempts)):
        remaining = time_remaining() if time_remaining is not None else None
        if remaining is not None and remaining < MIN_CALL_SECONDS:
            raise last_error or ModelTimeoutError("no time left for a model call")
        tally.attempts += 1
        try:
            reply = client.complete(messages, tools=tools, response_format=response_format, timeout=remaining)
        except ModelError as error:
            if not error.retryable:
                raise
            last_error = error
            continue
        tally.add(reply)
        return reply
    assert last_error is not None
    raise last_error
