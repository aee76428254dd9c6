"""The technical attempts of one single-turn model call, shared by the model verifier and the
model SemanticGuard.

Graph spec "technical retry occurs"; SemanticGuard spec "Semantic model budgets timeout
cancellation and retry":

- Every attempt sends the same `messages` and `response_format` objects: byte-identical input.
- Retried (up to `max_attempts`): a timeout, a transport failure (`ModelError.retryable`), and a
  reply whose content the role's `parse` rejects with one of `rejects` (a parse or schema
  failure). Nothing else: a refused request or a response that is not a chat completion ends
  the attempts at once, and a reply that parses — whatever its verdict — is the result.
- `gate()` is asked before every attempt (time left, budgets); a reason it returns ends the
  attempts as a technical failure.
- The call runs on its own daemon thread while the caller waits in short slices, checking
  `is_active` between them. When the caller is gone, `shared.errors.Cancelled` is raised: the pending
  call is abandoned and its late reply is never read or parsed. Cancellation is not a failure
  and produces no result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from shared.errors import Cancelled
from shared.model_client import MIN_CALL_SECONDS, ModelCallTally, ModelClient, ModelError, ModelReply, ModelTimeoutError

T = TypeVar("T")
POLL_SECONDS = 0.05
# How long past its own timeout an HTTP call may take before the wait gives up on it.
TIMEOUT_GRACE_SECONDS = 1.0
MAX_FAILURE_CHARS = 600


class ModelAttemptsFailed(Exception):
    """Every permitted attempt failed technically (or a failure was not retryable)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


IsActive = Callable[[], bool]


def _start(call: Callable[[], ModelReply]) -> Future:
    future: Future = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            future.set_exception(exc)

    threading.Thread(target=work, name="model-call", daemon=True).start()
    return future


def call_abandonably(
    call: Callable[[], ModelReply], timeout: float, is_active: IsActive | None = None
) -> ModelReply:
    """Run `call` on a worker thread; wait for it at most `timeout` (+ grace) seconds while the
    caller is active. Raises shared.errors.Cancelled when the caller goes away first."""
    future = _start(call)
    give_up = time.monotonic() + timeout + TIMEOUT_GRACE_SECONDS
    while True:
        if is_active is not None and not is_active():
            future.cancel()  # a running call cannot be stopped; its reply is simply never read
            raise Cancelled("the caller cancelled while a model call was pending")
        left = give_up - time.monotonic()
        if left <= 0:
            raise ModelTimeoutError(f"no reply within {timeout:.1f}s")
        try:
            reply = future.result(timeout=min(POLL_SECONDS, left))
        except FutureTimeout:
            continue
        if is_active is not None and not is_active():
            raise Cancelled("the caller cancelled before the reply was used")
        return reply


def _bounded(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_attempts(
    client: ModelClient,
    messages: Sequence[dict[str, Any]],
    parse: Callable[[str], T],
    *,
    tally: ModelCallTally,
    max_attempts: int,
    attempt_timeout: Callable[[], float],
    rejects: tuple[type[Exception], ...] = (ValueError,),
    response_format: dict[str, Any] | None = None,
    is_active: IsActive | None = None,
    gate: Callable[[], str | None] | None = None,
) -> T:
    """The parsed result of the first attempt that yields one; ModelAttemptsFailed otherwise."""
    failures: list[str] = []

    def failed(reason: str) -> ModelAttemptsFailed:
        failures.append(reason)
        return ModelAttemptsFailed("; ".join(failures)[:MAX_FAILURE_CHARS])

    for attempt in range(1, max(1, max_attempts) + 1):
        if is_active is not None and not is_active():
            raise Cancelled("the caller cancelled before a model call")
        stop = gate() if gate is not None else None
        if stop:
            raise failed(stop)
        timeout = attempt_timeout()
        if timeout < MIN_CALL_SECONDS:
            raise failed("no time left for a model call")
        tally.attempts += 1
        try:
            reply = call_abandonably(
                lambda: client.complete(messages, response_format=response_format, timeout=timeout),  # noqa: B023 - called in this iteration
                timeout,
                is_active,
            )
        except ModelError as error:
            if not error.retryable:
                raise failed(f"attempt {attempt}: {type(error).__name__}: {_bounded(error)}") from None
            failures.append(f"attempt {attempt}: {type(error).__name__}: {_bounded(error)}")
            continue
        tally.add(reply)
        try:
            return parse(reply.content or "")
        except rejects as error:
            failures.append(f"attempt {attempt}: output rejected: {_bounded(error)}")
    raise ModelAttemptsFailed("; ".join(failures)[:MAX_FAILURE_CHARS] or "no attempt was made")
