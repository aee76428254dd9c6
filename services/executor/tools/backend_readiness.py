"""Is a configured Prometheus / Loki there, and is it really one?

`probe` asks the build-info endpoint (identity) and then the readiness endpoint:
- it answers, but not as the expected system (an HTML page, another JSON API, a redirect, a
  refusal of our credentials): WrongBackendError. At start-up that stops the executor with a
  message naming the URL and what it answered — a wrong URL or credential does not heal itself.
- it does not answer, answers 5xx, or is not ready yet: Readiness(ok=False, detail). The executor
  starts anyway; `BackendHealth` reports that tool NOT_SERVING under
  `attest.executor.tools.<tool>` and re-probes every `recheck_seconds`, so an outage ends on its
  own and never becomes a crash loop. Calls are still made meanwhile: each failing one is an ERROR
  invocation whose message names the backend, so every run names the gap.

Health choice: the executor's own service (and "") stay SERVING while one backend is down, since
the other tools still work and a failed tool is reported in the answer, not hidden by a routing
layer; only the per-tool name goes NOT_SERVING.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
from grpc_health.v1 import health_pb2

from services.executor.tools.backends import BackendError
from services.executor.tools.http_api import MAX_ERROR_CHARS, first_line, send_get

log = logging.getLogger(__name__)

HEALTH_NAME_PREFIX = "attest.executor.tools."
DEFAULT_RECHECK_SECONDS = 15.0


class WrongBackendError(RuntimeError):
    """The URL answers, but not as the configured kind of backend (or refuses our credentials)."""


@dataclass(frozen=True)
class Readiness:
    ok: bool
    detail: str


@dataclass(frozen=True)
class ApiKind:
    """What makes a response the expected system's: its name, endpoints and build-info shape."""

    name: str
    buildinfo_path: str
    ready_path: str
    # Used when build info is 404 (older or compatible servers): must give a success JSON object.
    fallback_path: str
    fallback_params: Mapping[str, str]
    version_of: Callable[[Any], str | None]


def _prometheus_version(body: Any) -> str | None:
    data = body.get("data") if isinstance(body, dict) and body.get("status") == "success" else None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if isinstance(version, str) and version else None


def _loki_version(body: Any) -> str | None:
    # Loki's build info is the bare object {"version", "revision", "branch", "goVersion", …}.
    version = body.get("version") if isinstance(body, dict) and "goVersion" in body else None
    return str(version) if isinstance(version, str) and version else None


PROMETHEUS = ApiKind(
    name="Prometheus", buildinfo_path="/api/v1/status/buildinfo", ready_path="/-/ready",
    fallback_path="/api/v1/query", fallback_params={"query": "1"}, version_of=_prometheus_version,
)
LOKI = ApiKind(
    name="Loki", buildinfo_path="/loki/api/v1/status/buildinfo", ready_path="/ready",
    fallback_path="/loki/api/v1/labels", fallback_params={}, version_of=_loki_version,
)


def probe(client: httpx2.Client, kind: ApiKind, display_url: str) -> Readiness:
    """Identity first (WrongBackendError if it is not `kind`), then readiness. A 5xx on the
    identity endpoints is "not ready" (it may be starting behind a proxy), not a wrong backend."""
    try:
        return _probe(client, kind, display_url)
    except _Transient as exc:
        return Readiness(False, str(exc))


def _probe(client: httpx2.Client, kind: ApiKind, display_url: str) -> Readiness:
    where = f"{kind.name} at {display_url}"
    try:
        info = send_get(client, f"{where}: build info", kind.buildinfo_path)
    except BackendError as exc:
        return Readiness(False, f"unreachable: {exc}")
    if info.status_code == 404:
        try:
            info = send_get(client, f"{where}: {kind.fallback_path}", kind.fallback_path, dict(kind.fallback_params))
        except BackendError as exc:
            return Readiness(False, f"unreachable: {exc}")
        _check_answer(info, where, kind, lambda body: isinstance(body, dict) and body.get("status") == "success")
        version = "version unknown"
    else:
        body = _check_answer(info, where, kind, lambda body: kind.version_of(body) is not None)
        version = f"version {kind.version_of(body)}"
    try:
        ready = send_get(client, f"{where}: readiness", kind.ready_path)
    except BackendError as exc:
        return Readiness(False, f"unreachable: {exc}")
    if ready.status_code != 200:
        return Readiness(False, f"{where} ({version}) is not ready: HTTP {ready.status_code}: {first_line(ready)}")
    return Readiness(True, f"{where} is ready ({version})")


def _check_answer(response: httpx2.Response, where: str, kind: ApiKind, looks_right: Callable[[Any], bool]) -> Any:
    """The JSON body when it is `kind`'s; WrongBackendError for an answer that is not; BackendError
    (transient) for a 5xx."""
    status = response.status_code
    if status >= 500:
        raise _Transient(f"{where}: HTTP {status}: {first_line(response)}")
    if status in (401, 403):
        raise WrongBackendError(
            f"{where} refused our credentials ({response.request.url.path} answered HTTP {status}: "
            f"{first_line(response)}); check the auth settings"
        )
    try:
        body = response.json()
    except ValueError:
        body = None
    if status != 200 or not looks_right(body):
        snippet = " ".join(response.text.split())[:MAX_ERROR_CHARS] or response.reason_phrase
        location = f" (redirect to {response.headers.get('location')})" if 300 <= status < 400 else ""
        raise WrongBackendError(
            f"{where} is not a {kind.name} API: {response.request.url.path} answered HTTP {status}{location}: {snippet}"
        )
    return body


class _Transient(BackendError):
    pass


class Probed(Protocol):
    def readiness(self) -> Readiness: ...


class HealthSetter(Protocol):
    def set(self, service: str, status: Any) -> None: ...


class BackendHealth:
    """The readiness of the HTTP backends, by tool, in the gRPC health service."""

    def __init__(self, backends: Mapping[str, Probed], recheck_seconds: float = DEFAULT_RECHECK_SECONDS) -> None:
        self._backends = dict(backends)
        self._recheck = recheck_seconds
        self._state: dict[str, Readiness] = {}
        self._health: HealthSetter | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    @staticmethod
    def health_name(tool: str) -> str:
        return HEALTH_NAME_PREFIX + tool

    def check_at_startup(self) -> dict[str, Readiness]:
        """Probe every backend once; a WrongBackendError propagates (the process must not start)."""
        for tool, backend in self._backends.items():
            self._record(tool, backend.readiness())
        return dict(self._state)

    def state(self) -> dict[str, Readiness]:
        with self._lock:
            return dict(self._state)

    def attach(self, health: HealthSetter) -> None:
        """Publish the current state and keep it current until `stop()`."""
        self._health = health
        for tool, readiness in self.state().items():
            self._publish(tool, readiness)
        if self._backends:
            threading.Thread(target=self._loop, name="backend-health", daemon=True).start()

    def recheck(self) -> None:
        for tool, backend in self._backends.items():
            try:
                readiness = backend.readiness()
            except WrongBackendError as exc:  # once running, a wrong answer is an outage of that tool
                readiness = Readiness(False, str(exc))
            except Exception as exc:  # the monitor must outlive any probe bug
                readiness = Readiness(False, f"probe failed: {type(exc).__name__}: {str(exc)[:MAX_ERROR_CHARS]}")
            self._record(tool, readiness)
            self._publish(tool, readiness)

    def stop(self) -> None:
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self._recheck):
            self.recheck()

    def _record(self, tool: str, readiness: Readiness) -> None:
        with self._lock:
            before = self._state.get(tool)
            self._state[tool] = readiness
        if before is None or before.ok != readiness.ok:
            if readiness.ok:
                log.info("backend for %s: %s", tool, readiness.detail)
            else:
                log.warning("backend for %s is unavailable (tool NOT_SERVING, calls fail and runs name the gap): %s",
                            tool, readiness.detail)

    def _publish(self, tool: str, readiness: Readiness) -> None:
        if self._health is None:
            return
        status = health_pb2.HealthCheckResponse.SERVING if readiness.ok else health_pb2.HealthCheckResponse.NOT_SERVING
        self._health.set(self.health_name(tool), status)
