"""A loopback Prometheus + Loki HTTP API that refuses requests without a bearer token and an
`X-Scope-OrgID` header (or, with `page`, a web page that is no monitoring API at all): the
connection-settings tests run against it.

It can also fail the way a real backend fails once it has passed the start-up check:
set `failure` to one of `FAILURES` and every query — anything but the build-info and
readiness probes — gets HTTP 500 with Prometheus' error body (`http_500`), a 200 web page that is
no API answer (`not_json`), no answer until the client has given up (`hang`, held up to
`hang_seconds` or until `close()`), or the server dies on it: the connection is dropped without an
answer and the port closed (`die`; `Guarded(port=…)` starts it again on the same port)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.recorded_loki import Entry, RecordedLoki

TOKEN = "s3cret-token-value"
TENANT = "tenant-a"
END = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
START = END - timedelta(minutes=10)
PROM_BUILDINFO = {"status": "success", "data": {"version": "2.42.0", "revision": "x", "branch": "b",
                                                "buildUser": "u", "buildDate": "d", "goVersion": "go1.19"}}
LOKI_BUILDINFO = {"version": "2.9.2", "revision": "x", "branch": "b", "buildUser": "u", "buildDate": "d",
                  "goVersion": "go1.21"}
FAILURES = ("http_500", "not_json", "hang", "die")
PROBES = frozenset({"/api/v1/status/buildinfo", "/loki/api/v1/status/buildinfo", "/-/ready", "/ready"})
NOT_AN_API = b"<!doctype html><title>502 Bad Gateway</title><h1>Bad Gateway</h1>"
# Loki's recorded answer (its documented `streams` format, tests/recorded_loki.py): by default
# pay-svc's log lines, as offsets before the end of the asked window, with their level label and
# line. A test replaces `Guarded.loki.entries` to record other streams (without a level label,
# FATAL or INFO lines, a single ERROR line …); the recorder applies the LogQL the adapter sends.
LOKI_LINES = (
    (600, "ERROR", 'level=error msg="settlement call failed: upstream ledger-gw returned 503" trace=4f1c'),
    (240, "ERROR", 'level=error msg="settlement call failed: upstream ledger-gw returned 503" trace=9a2e'),
    (120, "WARN", 'level=warn msg="retry budget 80% used" route=/v1/settle'),
)
LOKI_SERVICE = "pay-svc"


def loki_entries(
    lines: Iterable[tuple[float, str | None, str]], service: str = LOKI_SERVICE, pod: str = "pay-svc-0"
) -> list[Entry]:
    """Recorded entries of one service under the `job` label: (seconds before the asked end,
    level label or None for a stream without one, line)."""
    entries = []
    for before_end, level, line in lines:
        labels = {"job": service, "pod": pod}
        if level is not None:
            labels["level"] = level
        entries.append(Entry(labels=labels, line=line, before_end=before_end))
    return entries


def prometheus_env(guarded: Guarded) -> dict[str, str]:
    """The executor's settings for reading metrics from `guarded` (its one service under `job`)."""
    return {
        "ATTEST_PROMETHEUS_URL": guarded.url,
        "ATTEST_PROMETHEUS_BEARER_TOKEN": TOKEN,
        "ATTEST_PROMETHEUS_HEADERS": f"X-Scope-OrgID={TENANT}",
        "ATTEST_PROMETHEUS_SERVICE_LABELS": "service,job",
        "ATTEST_TIME_ZONE": "UTC",
    }


def backends_env(prometheus: Guarded, loki: Guarded) -> dict[str, str]:
    """The executor's settings for reading metrics from `prometheus` and logs from `loki` (each
    knowing its services under `job`), with short timeouts and readiness rechecks."""
    env = {"ATTEST_BACKEND_TIMEOUT_SECONDS": "2", "ATTEST_BACKEND_RECHECK_SECONDS": "0.5"}
    for kind, server in (("PROMETHEUS", prometheus), ("LOKI", loki)):
        env |= {
            f"ATTEST_{kind}_URL": server.url,
            f"ATTEST_{kind}_BEARER_TOKEN": TOKEN,
            f"ATTEST_{kind}_HEADERS": f"X-Scope-OrgID={TENANT}",
            f"ATTEST_{kind}_SERVICE_LABELS": "service,job",
        }
    return env


class Guarded:
    """A loopback Prometheus + Loki API that answers only with `Authorization: Bearer <token>` and
    `X-Scope-OrgID: <tenant>`; a request without either gets 401 / 400 as Loki, Mimir and proxies do."""

    def __init__(self, port: int = 0, page: bytes | None = None) -> None:
        self.token = TOKEN
        self.requests: list[dict[str, str]] = []
        self.page = page  # when set: every path answers this HTML (not a monitoring API)
        self.loki = RecordedLoki(loki_entries(LOKI_LINES))  # what the Loki API serves
        self.ready = True
        self.failure: str | None = None  # one of FAILURES: how every query fails
        self.hang_seconds = 30.0
        self.dead = threading.Event()  # set once `die` has closed the port
        # When set: every query (not a probe) waits until the gate opens, then answers as usual;
        # `waiting` counts the queries held at it (a test's way to hold tool calls in flight).
        self.gate: threading.Event | None = None
        self.waiting = 0
        self._waiting_lock = threading.Lock()
        self._release = threading.Event()  # ends every `hang` (close)
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
                if guarded.failure is not None and url.path not in PROBES:
                    return self._fail(guarded.failure)
                gate = guarded.gate
                if gate is not None and url.path not in PROBES:
                    with guarded._waiting_lock:
                        guarded.waiting += 1
                    try:
                        gate.wait(guarded.hang_seconds)
                    finally:
                        with guarded._waiting_lock:
                            guarded.waiting -= 1
                status, body = guarded.answer(url.path, params)
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self._send(status, payload, "application/json" if not isinstance(body, bytes) else "text/plain")

            def _fail(self, failure: str) -> None:
                if failure == "http_500":
                    body = {"status": "error", "errorType": "internal", "error": "query processing failed"}
                    return self._send(500, json.dumps(body).encode(), "application/json")
                if failure == "not_json":
                    return self._send(200, NOT_AN_API, "text/html")
                if failure == "hang":
                    guarded._release.wait(guarded.hang_seconds)
                    self.close_connection = True
                    try:
                        self._send(503, b"gave up\n", "text/plain")
                    except OSError:
                        pass  # the client gave up long ago
                    return None
                if failure == "die":
                    # The process is gone mid-request: no answer on this connection, the port closed.
                    self.close_connection = True
                    guarded._stop()
                    guarded.dead.set()
                    return None
                raise ValueError(f"unknown failure {failure!r}; one of {FAILURES}")

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._stopping = threading.Lock()
        self._stopped = False
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
        if path == "/api/v1/label/job/values":
            return 200, {"status": "success", "data": ["pay-svc"]}
        if path.startswith("/loki/api/v1/label/") and path.endswith("/values"):
            return self.loki.label_values(path.split("/")[-2])
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
        if path == "/loki/api/v1/query_range":
            return self.loki.query_range(params)
        if path == "/loki/api/v1/query":
            return self.loki.query(params)
        return 404, {"status": "error", "errorType": "not_found", "error": path}

    def _stop(self) -> None:
        with self._stopping:
            if not self._stopped:
                self._stopped = True
                self._httpd.shutdown()
                self._httpd.server_close()

    def close(self) -> None:
        self._release.set()
        self._stop()
