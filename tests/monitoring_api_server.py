"""A loopback Prometheus + Loki HTTP API that refuses requests without a bearer token and an
`X-Scope-OrgID` header (or, with `page`, a web page that is no monitoring API at all): the
connection-settings tests (issue 16, point 6) run against it."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

TOKEN = "s3cret-token-value"
TENANT = "tenant-a"
END = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
START = END - timedelta(minutes=10)
PROM_BUILDINFO = {"status": "success", "data": {"version": "2.42.0", "revision": "x", "branch": "b",
                                                "buildUser": "u", "buildDate": "d", "goVersion": "go1.19"}}
LOKI_BUILDINFO = {"version": "2.9.2", "revision": "x", "branch": "b", "buildUser": "u", "buildDate": "d",
                  "goVersion": "go1.21"}


class Guarded:
    """A loopback Prometheus + Loki API that answers only with `Authorization: Bearer <token>` and
    `X-Scope-OrgID: <tenant>`; a request without either gets 401 / 400 as Loki, Mimir and proxies do."""

    def __init__(self, port: int = 0, page: bytes | None = None) -> None:
        self.token = TOKEN
        self.requests: list[dict[str, str]] = []
        self.page = page  # when set: every path answers this HTML (not a monitoring API)
        self.ready = True
        guarded = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # http.server's name
                url = urlparse(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                guarded.requests.append({"path": url.path, "authorization": self.headers.get("Authorization", ""),
                                         "tenant": self.headers.get("X-Scope-OrgID", ""), **params})
                if guarded.page is not None:
                    return self._send(200, guarded.page, "text/html")
                if self.headers.get("Authorization") != f"Bearer {guarded.token}":
                    return self._send(401, b"Unauthorized\n", "text/plain")
                if self.headers.get("X-Scope-OrgID") != TENANT:
                    return self._send(400, b"no org id\n", "text/plain")
                status, body = guarded.answer(url.path, params)
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self._send(status, payload, "application/json" if not isinstance(body, bytes) else "text/plain")

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, object]:
        if path == "/api/v1/status/buildinfo":
            return 200, PROM_BUILDINFO
        if path == "/loki/api/v1/status/buildinfo":
            return 200, LOKI_BUILDINFO
        if path in ("/-/ready", "/ready"):
            return (200, b"Ready.\n") if self.ready else (503, b"Service Unavailable\n")
        if path in ("/api/v1/label/job/values", "/loki/api/v1/label/job/values"):
            return 200, {"status": "success", "data": ["pay-svc"]}
        if path.endswith("/values"):
            return 200, {"status": "success", "data": []}
        if path == "/api/v1/series":  # the same series, listed (the backend types them first)
            found = [{"__name__": "cpu_usage_percent", "job": "pay-svc"}] if 'job="pay-svc"' in params["match[]"] else []
            return 200, {"status": "success", "data": found}
        if path == "/api/v1/metadata":
            return 200, {"status": "success", "data": {"cpu_usage_percent": [{"type": "gauge", "help": "", "unit": ""}]}}
        if path == "/api/v1/query_range":
            # Series only under the `job` label: the `service` label finds nothing.
            if 'job="pay-svc"' not in params["query"]:
                return 200, {"status": "success", "data": {"resultType": "matrix", "result": []}}
            values = [[START.timestamp() + i * 60, "42"] for i in range(3)]
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"__name__": "cpu_usage_percent"}, "values": values}]}}
        return 404, {"status": "error", "errorType": "not_found", "error": path}

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
