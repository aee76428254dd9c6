"""One GET against a monitoring system's JSON HTTP API (Prometheus, Loki): an object (`get_api_json`)
or a list of strings (`get_api_strings`, the label-values endpoints), with every failure turned
into a BackendError that says what went wrong: timeout, unreachable, HTTP status, an
`"status": "error"` body, or a body that is not the documented JSON.

Also how the client connects: bearer or basic auth, a CA file, extra headers
(`X-Scope-OrgID` for Loki/Mimir/Cortex). Secrets are read from the settings or from files at each
request (a mounted token may be rotated) and never appear in a message, log line or `repr`.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2

from services.executor.tools.backends import BackendError

MAX_ERROR_CHARS = 300


class ConnectionConfigError(ValueError):
    """Connection settings that cannot work (both bearer and basic auth, an unreadable CA file …)."""


@dataclass(frozen=True)
class Secret:
    """A secret given inline or as a file read at each use; `repr` never shows it."""

    value: str | None = field(default=None, repr=False)
    file: str | None = None

    def read(self) -> str:
        if self.file is not None:
            try:
                return Path(self.file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise BackendError(f"cannot read secret file {self.file}: {exc.strerror or type(exc).__name__}") from None
        return self.value or ""


@dataclass(frozen=True)
class HttpConnection:
    """How to reach one monitoring API. `headers` values may be tenant ids or keys: never logged."""

    base_url: str
    timeout_seconds: float = 10.0
    bearer_token: Secret | None = None
    basic_auth_user: str | None = None
    basic_auth_password: Secret | None = None
    ca_file: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.bearer_token is not None and self.basic_auth_user is not None:
            raise ConnectionConfigError(f"{self.display_url}: set bearer or basic auth, not both")
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ConnectionConfigError(f"{self.display_url}: basic auth needs both a user and a password")
        if self.ca_file is not None and not Path(self.ca_file).is_file():
            raise ConnectionConfigError(f"{self.display_url}: CA file not found: {self.ca_file}")
        if any(name.lower() == "authorization" for name in self.headers) and (
            self.bearer_token is not None or self.basic_auth_user is not None
        ):
            raise ConnectionConfigError(f"{self.display_url}: an Authorization header and bearer/basic auth conflict")

    @property
    def display_url(self) -> str:
        """The base URL without any user:password@ part, safe for logs, messages and sources."""
        return redact_url(self.base_url)


def redact_url(url: str) -> str:
    parts = urlsplit(url.rstrip("/"))
    if "@" not in parts.netloc:
        return url.rstrip("/")
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


class _SecretAuth(httpx2.Auth):
    """Bearer or basic auth whose secret is read at each request."""

    def __init__(self, connection: HttpConnection) -> None:
        self._connection = connection

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        connection = self._connection
        if connection.bearer_token is not None:
            request.headers["Authorization"] = f"Bearer {connection.bearer_token.read()}"
        elif connection.basic_auth_user is not None and connection.basic_auth_password is not None:
            pair = f"{connection.basic_auth_user}:{connection.basic_auth_password.read()}".encode()
            request.headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        yield request


def make_client(connection: HttpConnection) -> httpx2.Client:
    """A pooled client; the one timeout bounds connect, read, write and pool waits alike."""
    verify: ssl.SSLContext | bool = True
    if connection.ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=connection.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionConfigError(f"{connection.display_url}: unusable CA file {connection.ca_file}: {exc}") from None
    return httpx2.Client(
        base_url=connection.base_url.rstrip("/"),
        timeout=httpx2.Timeout(connection.timeout_seconds),
        follow_redirects=False,
        headers=dict(connection.headers),
        auth=_SecretAuth(connection),
        verify=verify,
        trust_env=False,  # a proxy or CA bundle from the environment would bypass these settings
    )


def get_api_data(client: httpx2.Client, what: str, path: str, params: dict[str, Any]) -> Any:
    """The `data` of a successful API response, whatever its shape (the caller checks it)."""
    return _get_api_data(client, what, path, params)


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


def send_get(client: httpx2.Client, what: str, path: str, params: dict[str, Any] | None = None) -> httpx2.Response:
    """The response to one GET; a transport failure or timeout is a BackendError naming `what`."""
    try:
        return client.get(path, params=params)
    except httpx2.TimeoutException:
        raise BackendError(f"{what}: no response within {_timeout_text(client)}") from None
    except httpx2.HTTPError as exc:
        raise BackendError(f"{what}: request failed: {type(exc).__name__}: {str(exc)[:MAX_ERROR_CHARS]}") from None


def first_line(response: httpx2.Response) -> str:
    text = response.text.strip()
    return text.splitlines()[0][:MAX_ERROR_CHARS] if text else response.reason_phrase


def _get_api_data(client: httpx2.Client, what: str, path: str, params: dict[str, Any]) -> Any:
    response = send_get(client, what, path, params)
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("status") == "error":
        kind = body.get("errorType") or "error"
        message = str(body.get("error") or "")[:MAX_ERROR_CHARS]
        raise BackendError(f"{what}: HTTP {response.status_code} {kind}: {message}")
    if response.status_code >= 400:
        raise BackendError(f"{what}: HTTP {response.status_code}: {first_line(response)}")
    if not isinstance(body, dict) or body.get("status") != "success" or "data" not in body:
        raise BackendError(f"{what}: unexpected response (not a success JSON object with data)")
    return body["data"]


def _timeout_text(client: httpx2.Client) -> str:
    read = client.timeout.read
    return f"{read:g}s" if read is not None else "the timeout"
