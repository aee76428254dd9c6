"""The one attempts rule of every role's model calls (`shared.model_client.run_attempts`): what is
retried, on which input, within which time, and that a cancelled caller never receives (or
parses) a late reply."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.config import ModelSettings
from shared.core.contracts import TokenUsage
from shared.errors import Cancelled
from shared.model_client import (
    ModelAttemptsFailed,
    ModelCallTally,
    ModelReply,
    ModelResponseError,
    ModelTimeoutError,
    OpenAIChatClient,
    run_attempts,
)
from tests.scripted_model_server import Delay, ScriptedModelServer, completion

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "{}"}]


class Client:
    provider, model, timeout_seconds = "openai", "m", 30.0

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


def parse(reply: ModelReply) -> str:
    text = reply.content or ""
    if not text.startswith("ok"):
        raise ValueError(f"bad reply {text!r}")
    return text


def attempts(client, **kwargs):
    tally = ModelCallTally()
    kwargs.setdefault("max_attempts", 2)
    result = run_attempts(client, MESSAGES, parse, tally=tally, time_remaining=lambda: 5.0, rejects=(ValueError,),
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
        run_attempts(client, MESSAGES, lambda reply: parsed.append(reply.content) or reply, tally=ModelCallTally(),
                     max_attempts=2, time_remaining=lambda: 5.0, is_active=active.is_set)
    release.set()  # the late reply arrives after the caller left
    assert parsed == [] and len(client.calls) == 1


# --- against real HTTP: a hung call is abandoned ---------------------------------------------------


HOLD_SECONDS = 20.0


class HangingServer:
    """A real HTTP server that takes each request and does not finish answering it: it sends
    nothing, or (`trickle`) a 200 with its headers and then one byte of body every 0.1 s — each
    read well within the client's read timeout, so httpx's own timeout never fires and only
    abandoning the call ends it. `open_calls` counts the requests it is still holding."""

    def __init__(self, *, trickle: bool) -> None:
        self.release = threading.Event()
        self.requests: list[dict] = []
        self.open_calls = 0
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - the base class's name
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with lock:
                    owner.requests.append(body)
                    owner.open_calls += 1
                try:
                    if trickle:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", "1000000")
                        self.end_headers()
                    # Held for HOLD_SECONDS at most, so that a call nobody abandons ends (and fails the test).
                    for _ in range(int(HOLD_SECONDS / 0.1)):
                        if owner.release.wait(0.1):
                            break
                        if trickle:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                except OSError:
                    pass
                finally:
                    with lock:
                        owner.open_calls -= 1

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> HangingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


def http_client(base_url: str, timeout_seconds: float) -> OpenAIChatClient:
    return OpenAIChatClient(ModelSettings(provider="openai", base_url=base_url, model="m", timeout_seconds=timeout_seconds))


@pytest.mark.parametrize("trickle", [False, True], ids=["silent", "trickling"])
def test_a_call_that_hangs_past_its_timeout_is_abandoned_and_retried_on_the_same_input(trickle):
    tally = ModelCallTally()
    with HangingServer(trickle=trickle) as server:
        with pytest.raises(ModelAttemptsFailed) as failed:
            run_attempts(http_client(server.base_url, 0.5), MESSAGES, lambda reply: reply, tally=tally, max_attempts=2)
        # Both attempts were given up while the server still held them.
        assert server.open_calls == 2
        assert len(server.requests) == 2 and server.requests[0] == server.requests[1]
    assert tally.attempts == 2 and tally.total_tokens == 0
    assert [reason.split(": ")[1] for reason in failed.value.failures] == ["ModelTimeoutError", "ModelTimeoutError"]
    assert isinstance(failed.value.last, ModelTimeoutError)


def test_each_attempt_is_bounded_by_the_time_left_not_only_by_the_clients_timeout():
    # The client would wait 120 s and the server answers after 60 s: only the caller's 0.6 s ends it.
    with ScriptedModelServer([Delay(60.0, completion("late"))]) as server:
        with pytest.raises(ModelAttemptsFailed) as failed:
            run_attempts(http_client(server.base_url, 120.0), MESSAGES, lambda reply: reply, tally=ModelCallTally(),
                         max_attempts=1, time_remaining=lambda: 0.6)
        assert len(server.requests) == 1
    assert isinstance(failed.value.last, ModelTimeoutError)


def test_the_model_call_span_stays_a_child_of_the_callers_span():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ScriptedModelServer([completion("ok")]) as server:
        client = OpenAIChatClient(ModelSettings(provider="openai", base_url=server.base_url, model="m"),
                                  tracer_provider=provider)
        with provider.get_tracer("test").start_as_current_span("handler") as handler:
            run_attempts(client, MESSAGES, lambda reply: reply, tally=ModelCallTally(), max_attempts=1)
    [chat] = [span for span in exporter.get_finished_spans() if span.name.startswith("chat ")]
    assert chat.parent is not None and chat.parent.span_id == handler.get_span_context().span_id
