"""A scripted OpenAI-compatible model server: real HTTP on a loopback port, for any role's tests.

`POST /v1/chat/completions` answers with the next item of the script and records every request
body, so a test can drive a role through the real `openai` client and then assert what the role
sent (messages, tools, response_format). A script item is one of:

- a dict: the JSON body of a 200 response (build it with `completion(...)`);
- `Status(code, body)`: an HTTP error response;
- `Delay(seconds, item)`: wait (e.g. past the client's timeout), then answer with `item`;
- a callable `(request_body) -> item`: computed from the request (e.g. an endless tool-call loop).

When the script is exhausted the last item repeats if `repeat_last` is set; otherwise the server
answers 500, so a role that calls more often than the test expects fails loudly.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Status:
    code: int
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Delay:
    seconds: float
    item: Any


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One entry of `message.tool_calls`; `arguments` as a dict, or raw text to send it verbatim."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id or f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": text}}


def completion(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    model: str = "scripted-model",
) -> dict[str, Any]:
    """A chat.completion body as an OpenAI-compatible server sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedModelServer:
    """Use as a context manager; `base_url` is what a role's `ATTEST_*_MODEL_BASE_URL` takes."""

    def __init__(self, script: list[Any] | None = None, *, repeat_last: bool = False) -> None:
        self._script = list(script or [])
        self.repeat_last = repeat_last
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a Delay still sleeping must not hold up shutdown
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def add(self, *items: Any) -> None:
        with self._lock:
            self._script.extend(items)

    def __enter__(self) -> ScriptedModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next_item(self, body: dict[str, Any]) -> Any:
        with self._lock:
            self.requests.append(body)
            if self._script:
                item = self._script.pop(0) if (len(self._script) > 1 or not self.repeat_last) else self._script[0]
            else:
                item = Status(500, {"error": {"message": "scripted model server: script exhausted", "type": "server_error"}})
        while callable(item):
            item = item(body)
        return item

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body if body is not None else {}).encode("utf-8")
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout); nothing to deliver

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                with owner._lock:
                    owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                item = owner._next_item(body)
                while isinstance(item, Delay):
                    time.sleep(item.seconds)
                    item = item.item
                    while callable(item):
                        item = item(body)
                if isinstance(item, Status):
                    self._send(item.code, item.body or {"error": {"message": f"scripted HTTP {item.code}"}})
                else:
                    self._send(200, item)

        return Handler
