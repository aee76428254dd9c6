"""The ModelClient seam over the real `openai` package against a scripted OpenAI-compatible
server on a loopback port: request shape, reply parsing, error classes, retries."""

from __future__ import annotations

import socket

import pytest
from pydantic import SecretStr

from shared.config import ModelSettings
from shared.model_client import (
    ModelCallTally,
    ModelRequestError,
    ModelResponseError,
    ModelTimeoutError,
    ModelTransportError,
    OpenAIChatClient,
    complete_with_retries,
)
from tests.scripted_model_server import Delay, ScriptedModelServer, Status, completion, tool_call

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def _client(server: ScriptedModelServer, **overrides) -> OpenAIChatClient:
    settings = ModelSettings(provider="openai", base_url=server.base_url, model="m-1", **overrides)
    return OpenAIChatClient(settings)


def test_request_shape_and_reply_with_tool_calls():
    tools = [{"type": "function", "function": {"name": "query_logs", "description": "d", "parameters": {"type": "object"}}}]
    with ScriptedModelServer([
        completion(None, tool_calls=[tool_call("query_logs", {"service": "a"}, "call_9")], prompt_tokens=30, completion_tokens=4),
    ]) as server:
        client = _client(server, api_key=SecretStr("sk-test"), max_tokens=256, temperature=0.3)
        reply = client.complete(MESSAGES, tools=tools, response_format={"type": "json_object", "schema": {"type": "object"}})
        [body] = server.requests
        [headers] = server.headers
    assert body["model"] == "m-1" and body["messages"] == MESSAGES
    assert body["max_tokens"] == 256 and body["temperature"] == 0.3
    assert body["tools"] == tools
    assert body["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    assert headers["authorization"] == "Bearer sk-test"
    assert reply.content is None and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [("call_9", "query_logs", '{"service": "a"}')]
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (30, 4, 34)
    assert reply.model == "scripted-model"


def test_server_errors_and_timeouts_are_retryable():
    with ScriptedModelServer([Status(500), Delay(2.0, completion("late")), Status(429)]) as server:
        client = _client(server, timeout_seconds=0.4)
        with pytest.raises(ModelTransportError) as server_error:
            client.complete(MESSAGES)
        with pytest.raises(ModelTimeoutError) as timeout:
            client.complete(MESSAGES)
        with pytest.raises(ModelTransportError) as rate_limited:
            client.complete(MESSAGES)
    assert server_error.value.retryable and timeout.value.retryable and rate_limited.value.retryable
    assert "500" in str(server_error.value) and "429" in str(rate_limited.value)


def test_refused_requests_and_non_completions_are_final():
    with ScriptedModelServer([
        Status(401, {"error": {"message": "bad key", "type": "invalid_request_error"}}),
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []},
    ]) as server:
        client = _client(server)
        with pytest.raises(ModelRequestError) as refused:
            client.complete(MESSAGES)
        with pytest.raises(ModelResponseError):
            client.complete(MESSAGES)
    assert not refused.value.retryable and "401" in str(refused.value)


def test_unreachable_endpoint_is_a_transport_error():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIChatClient(ModelSettings(provider="openai", base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    with pytest.raises(ModelTransportError):
        client.complete(MESSAGES)


def test_retries_only_what_is_retryable_and_counts_every_attempt():
    with ScriptedModelServer([Status(503), completion("ok", prompt_tokens=5, completion_tokens=2)]) as server:
        tally = ModelCallTally()
        reply = complete_with_retries(_client(server), MESSAGES, tally=tally, max_attempts=2)
        # Byte-identical input on the second attempt.
        assert server.requests[0] == server.requests[1]
    assert reply.content == "ok"
    assert tally.attempts == 2 and (tally.usage.prompt_tokens, tally.usage.total_tokens) == (5, 7)

    with ScriptedModelServer([Status(400), completion("never")]) as server:
        tally = ModelCallTally()
        with pytest.raises(ModelRequestError):
            complete_with_retries(_client(server), MESSAGES, tally=tally, max_attempts=3)
        assert len(server.requests) == 1 and tally.attempts == 1


def test_no_call_is_started_without_time_left():
    with ScriptedModelServer([completion("ok")]) as server:
        tally = ModelCallTally()
        with pytest.raises(ModelTimeoutError):
            complete_with_retries(_client(server), MESSAGES, tally=tally, max_attempts=2, time_remaining=lambda: 0.05)
        assert server.requests == [] and tally.attempts == 0
