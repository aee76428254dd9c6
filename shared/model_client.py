"""The one seam through which a role calls a model (DESIGN §5, STYLE "Agents, prompts and tools").

`OpenAIChatClient` speaks to any OpenAI-compatible `/v1/chat/completions` endpoint through the
`openai` package: one HTTP request per `complete()` (the package's own retries are off, so every
attempt is counted here), a timeout on every call, errors classified into retryable
(`ModelTransportError`, `ModelTimeoutError`) and final ones, and one OpenTelemetry span per call
with the GenAI semantic-convention attributes. Spans carry model names, token counts and finish
reasons — never prompt or completion text.

`run_attempts` is the one attempts rule every role follows: bounded attempts on byte-identical
input, retrying only what is retryable (and, where the role asks, a reply it cannot parse), each
attempt bounded by the time left and abandoned when it hangs past its timeout (`call_abandonably`:
httpx's timeout bounds each read, not the whole call, so a server trickling bytes would otherwise
hold it forever). `complete_with_retries` is the same rule for a role that reads the reply itself.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar
from urllib.parse import urlsplit

import openai
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.config import ModelSettings
from shared.core.contracts import TokenUsage
from shared.errors import Cancelled

T = TypeVar("T")
# Seconds left for the next model call; None when the caller set no deadline.
TimeRemaining = Callable[[], float | None]
# False once the caller has gone away (a cancelled RPC).
IsActive = Callable[[], bool]
# Below this many seconds of caller budget a model call is not started: it could not finish.
MIN_CALL_SECONDS = 0.2
NO_TIME_LEFT = "no time left for a model call"
# How long past its own timeout a call may take before the wait gives up on it.
TIMEOUT_GRACE_SECONDS = 1.0
POLL_SECONDS = 0.05
MAX_FAILURE_CHARS = 600
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
    # The longest one call may take; an attempt's timeout never exceeds it.
    timeout_seconds: float

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
        self.timeout_seconds = settings.timeout_seconds
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
            raise ModelTimeoutError(NO_TIME_LEFT)
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


class ModelAttemptsFailed(Exception):
    """No attempt produced a result: every permitted one failed, or a failure ended them early.

    `failures` names each failed attempt ("attempt 2: ModelTimeoutError: …", "attempt 1: output
    rejected: …") and, last, why no further attempt was made when it was not the bound (no time
    left, a spent budget); `last` is the failure that ended the attempts."""

    def __init__(self, failures: list[str], last: Exception) -> None:
        self.failures = list(failures)
        self.last = last
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        return "; ".join(self.failures)[:MAX_FAILURE_CHARS]


def call_abandonably(call: Callable[[], ModelReply], timeout: float, is_active: IsActive | None = None) -> ModelReply:
    """Run `call` on a worker thread and wait for it at most `timeout` (+ grace) seconds while the
    caller is active. A call still pending then is abandoned: ModelTimeoutError, and its late reply
    is never read. `shared.errors.Cancelled` when the caller goes away first."""
    future: Future[ModelReply] = Future()
    caller_context = contextvars.copy_context()  # the caller's trace context: the call's span stays its child

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(caller_context.run(call))
        except BaseException as exc:  # handed to the waiting caller
            future.set_exception(exc)

    threading.Thread(target=work, name="model-call", daemon=True).start()
    give_up = time.monotonic() + timeout + TIMEOUT_GRACE_SECONDS
    while True:
        if is_active is not None and not is_active():
            future.cancel()  # a running call cannot be stopped; its reply is simply never read
            raise Cancelled("the caller cancelled while a model call was pending")
        left = give_up - time.monotonic()
        if left <= 0:
            raise ModelTimeoutError(f"no reply within {timeout:.1f}s: the call was abandoned")
        try:
            reply = future.result(timeout=min(POLL_SECONDS, left))
        except FutureTimeout:
            continue
        if is_active is not None and not is_active():
            raise Cancelled("the caller cancelled before the reply was used")
        return reply


def _bounded(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_attempts(
    client: ModelClient,
    messages: Sequence[dict[str, Any]],
    parse: Callable[[ModelReply], T],
    *,
    tally: ModelCallTally,
    max_attempts: int,
    rejects: tuple[type[Exception], ...] = (),
    time_remaining: TimeRemaining | None = None,
    is_active: IsActive | None = None,
    gate: Callable[[], str | None] | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
) -> T:
    """The attempts of one model turn, the one rule every role follows (graph spec "technical retry
    occurs"; SemanticGuard spec "Semantic model budgets timeout cancellation and retry"):

    1. At most `max_attempts` attempts, each sending the same `messages`, `tools` and
       `response_format` objects: byte-identical input.
    2. Before each attempt: the caller must still be active (else `shared.errors.Cancelled`), the
       `gate` (budgets) must not name a reason to stop, and the attempt's timeout — the client's
       own, bounded by `time_remaining()` — must be at least MIN_CALL_SECONDS; otherwise the
       attempts end.
    3. Each attempt is counted in `tally` and runs abandonably (`call_abandonably`): a call that
       hangs past its timeout is given up, and a caller gone while it is pending raises Cancelled.
    4. Retried: a retryable failure (`ModelError.retryable`: timeout, transport, 5xx, 429) and a
       reply that `parse` rejects with one of `rejects` (an unparseable reply, where the role
       wants it retried). Nothing else: a refused request or a response that is not a chat
       completion ends the attempts at once, and a reply that parses is the result.

    ModelAttemptsFailed when no attempt yields a result."""
    failures: list[str] = []
    last: Exception | None = None
    for attempt in range(1, max(1, max_attempts) + 1):
        if is_active is not None and not is_active():
            raise Cancelled("the caller cancelled before a model call")
        stop = gate() if gate is not None else None
        if stop:
            raise ModelAttemptsFailed([*failures, stop], ModelError(stop))
        timeout = _attempt_timeout(client, time_remaining)
        if timeout < MIN_CALL_SECONDS:
            raise ModelAttemptsFailed([*failures, NO_TIME_LEFT], ModelTimeoutError(NO_TIME_LEFT))
        call = functools.partial(client.complete, messages, tools=tools, response_format=response_format, timeout=timeout)
        tally.attempts += 1
        try:
            reply = call_abandonably(call, timeout, is_active)
        except ModelError as error:
            failures.append(f"attempt {attempt}: {type(error).__name__}: {_bounded(str(error))}")
            if not error.retryable:
                raise ModelAttemptsFailed(failures, error) from None
            last = error
            continue
        tally.add(reply)
        try:
            return parse(reply)
        except rejects as error:
            failures.append(f"attempt {attempt}: output rejected: {_bounded(str(error))}")
            last = error
    assert last is not None  # at least one attempt ran and failed
    raise ModelAttemptsFailed(failures, last)


def _attempt_timeout(client: ModelClient, time_remaining: TimeRemaining | None) -> float:
    left = time_remaining() if time_remaining is not None else None
    return client.timeout_seconds if left is None else min(client.timeout_seconds, left)


def _reply(reply: ModelReply) -> ModelReply:
    return reply


def complete_with_retries(
    client: ModelClient,
    messages: Sequence[dict[str, Any]],
    *,
    tally: ModelCallTally,
    max_attempts: int,
    time_remaining: TimeRemaining | None = None,
    is_active: IsActive | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    response_format: dict[str, Any] | None = None,
) -> ModelReply:
    """`run_attempts` for a role that reads the reply itself (no reply is retried for its
    content): the reply, or the ModelError that ended the attempts."""
    try:
        return run_attempts(
            client, messages, _reply, tally=tally, max_attempts=max_attempts, time_remaining=time_remaining,
            is_active=is_active, tools=tools, response_format=response_format,
        )
    except ModelAttemptsFailed as failed:
        raise failed.last from None
