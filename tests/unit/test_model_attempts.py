"""The shared technical-attempt rule of the verifier's model calls: what is retried, on which input,
and that a cancelled caller never receives (or parses) a late reply."""

from __future__ import annotations

import threading

import pytest

from services.verifier.model_attempts import ModelAttemptsFailed, run_attempts
from shared.contracts import TokenUsage
from shared.errors import Cancelled
from shared.model_client import ModelCallTally, ModelReply, ModelResponseError, ModelTimeoutError

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "{}"}]


class Client:
    provider, model = "openai", "m"

    def __init__(self, *items, gate: threading.Event | None = None):
        self.items, self.calls, self.gate = list(items), [], gate
        self.started = threading.Event()

    def complete(self, messages, *, tools=None, response_format=None, timeout=None):
        self.calls.append((messages, response_format))
        self.started.set()
        if self.gate is not None:
            self.gate.wait(5)
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return ModelReply(content=item, usage=TokenUsage(total_tokens=4))


def parse(text: str) -> str:
    if not text.startswith("ok"):
        raise ValueError(f"bad reply {text!r}")
    return text


def attempts(client, **kwargs):
    tally = ModelCallTally()
    kwargs.setdefault("max_attempts", 2)
    result = run_attempts(client, MESSAGES, parse, tally=tally, attempt_timeout=lambda: 5.0,
                          response_format={"type": "json_object"}, **kwargs)
    return result, tally


def test_timeout_then_parse_failure_spends_both_attempts_on_the_same_input():
    client = Client(ModelTimeoutError("slow"), "garbage", "ok")
    with pytest.raises(ModelAttemptsFailed) as failed:
        attempts(client)
    assert len(client.calls) == 2
    assert client.calls[0] == client.calls[1] and client.calls[0][0] is MESSAGES
    assert "ModelTimeoutError" in failed.value.reason and "output rejected" in failed.value.reason


def test_a_parsed_reply_is_final_and_counted():
    result, tally = attempts(Client("garbage", "ok-1", "ok-2"))
    assert result == "ok-1" and tally.attempts == 2 and tally.total_tokens == 8


def test_a_response_that_is_not_a_completion_is_not_retried():
    client = Client(ModelResponseError("no choices"), "ok")
    with pytest.raises(ModelAttemptsFailed):
        attempts(client)
    assert len(client.calls) == 1


def test_a_gate_reason_stops_before_the_call():
    client = Client("ok")
    with pytest.raises(ModelAttemptsFailed, match="budget"):
        attempts(client, gate=lambda: "budget spent")
    assert client.calls == []


def test_cancellation_while_the_call_is_pending_releases_nothing():
    release = threading.Event()
    client = Client("ok-late", gate=release)
    active = threading.Event()
    active.set()
    parsed: list[str] = []

    def cancel_when_started():
        client.started.wait(5)
        active.clear()  # the caller goes away while the model call is pending

    threading.Thread(target=cancel_when_started, daemon=True).start()
    with pytest.raises(Cancelled):
        run_attempts(client, MESSAGES, lambda text: parsed.append(text) or text, tally=ModelCallTally(), max_attempts=2,
                     attempt_timeout=lambda: 5.0, is_active=active.is_set)
    release.set()  # the late reply arrives after the caller left
    assert parsed == [] and len(client.calls) == 1
