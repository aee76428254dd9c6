"""One GET against a monitoring system's JSON HTTP API (Prometheus, Loki): an object (`get_api_json`)
or a list of strings (`get_api_strings`, the label-values endpoints), with every failure turned
into a BackendError that says what went wrong: timeout, unreachable, HTTP status, an
`"status": "error"` body, or a body that is not the documented JSON."""

from __future__ import annotations

from typing import Any

import httpx2

from services.executor.tools.backends import BackendError

MAX_ERROR_CHARS = 300


def make_client(base_url: str, timeout_seconds: float) -> httpx2.Client:
    """A pooled client; the one timeout bounds connect, read, write and pool waits alike."""
    return httpx2.Client(base_url=base_url.rstrip("/"), timeout=httpx2.Timeout(timeout_seconds), follow_redirects=False)


def get_api_json(client: httpx2.Client, what: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
    """The `data` object of a successful API response."""
    data = _get_api_data(client, what, path, params)
    if not isinstance(data, dict):
        raise BackendError(f"{what}: unexpected response (not a success JSON object with data)")
    return data


def get_api_strings(client: httpx2.Client, what: str, path: str, params: dict[str, Any]) -> list[str]:
    """The `data` list of strings of a successful API response (the label-values endpoints)."""
    data = _get_api_data(client, what, path, params)
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise BackendError(f"{what}: unexpected response (data is not a list of strings)")
    return data


def _get_api_data(client: httpx2.Client, what: str, path: str, params: dict[str, Any]) -> Any:
    try:
        response = client.get(path, params=params)
    except httpx2.TimeoutException:
        raise BackendError(f"{what}: no response within {_timeout_text(client)}") from None
    except httpx2.HTTPError as exc:
        raise BackendError(f"{what}: request failed: {type(exc).__name__}: {str(exc)[:MAX_ERROR_CHARS]}") from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("status") == "error":
        kind = body.get("errorType") or "error"
        message = str(body.get("error") or "")[:MAX_ERROR_CHARS]
        raise BackendError(f"{what}: HTTP {response.status_code} {kind}: {message}")
    if response.status_code >= 400:
        detail = response.text.strip().splitlines()[0][:MAX_ERROR_CHARS] if response.text.strip() else response.reason_phrase
        raise BackendError(f"{what}: HTTP {response.status_code}: {detail}")
    if not isinstance(body, dict) or body.get("status") != "success" or "data" not in body:
        raise BackendError(f"{what}: unexpected response (not a success JSON object with data)")
    return body["data"]


def _timeout_text(client: httpx2.Client) -> str:
    read = client.timeout.read
    return f"{read:g}s" if read is not None else "the timeout"
