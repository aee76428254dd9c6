"""Settings for every process, read from `ATTEST_*` environment variables and an optional `.env`.

One class per role (DESIGN §6). A role's port is read from `ATTEST_<ROLE>_PORT`, so one `.env`
can hold the ports of all six services without them colliding on a shared `ATTEST_PORT`.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_PORTS: dict[str, int] = {
    "gateway": 50050,
    "planner": 50051,
    "executor": 50052,
    "gatekeeper": 50053,
    "verifier": 50054,
    "composer": 50055,
}


def _port_field(role: str) -> Any:
    """A `port` field read from `ATTEST_<ROLE>_PORT`; 0 asks the OS for a free port."""
    return Field(
        default=DEFAULT_PORTS[role],
        ge=0,
        le=65535,
        validation_alias=AliasChoices(f"ATTEST_{role.upper()}_PORT"),
        description=f"Port the {role} listens on (0 = ephemeral).",
    )


def _default_addr(role: str) -> str:
    return f"127.0.0.1:{DEFAULT_PORTS[role]}"


class CommonSettings(BaseSettings):
    """Settings every process shares."""

    model_config = SettingsConfigDict(
        env_prefix="ATTEST_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        # Aliased fields (port, otlp_endpoint) can still be passed by name in code and tests.
        populate_by_name=True,
    )

    bind_host: str = "127.0.0.1"
    database_url: str = "sqlite:///var/attest.db"
    # The standard OTel variable wins so that deploy files written for any OTel app just work.
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "ATTEST_OTLP_ENDPOINT"),
    )
    log_level: str = "INFO"
    max_message_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    shutdown_grace_seconds: float = Field(default=5.0, ge=0.0)
    max_workers: int = Field(default=16, gt=0)


class ServiceSettings(CommonSettings):
    """Base of the per-role settings: a process that listens on a port."""

    port: int = Field(default=0, ge=0, le=65535)


class GatewaySettings(ServiceSettings):
    """The public entry point: where the five internal services are and how callers authenticate."""

    port: int = _port_field("gateway")
    planner_addr: str = _default_addr("planner")
    executor_addr: str = _default_addr("executor")
    gatekeeper_addr: str = _default_addr("gatekeeper")
    verifier_addr: str = _default_addr("verifier")
    composer_addr: str = _default_addr("composer")
    # None disables authentication (local development only).
    auth_token: str | None = None
    diagnosis_timeout_seconds: float = Field(default=60.0, gt=0.0)
    max_query_chars: int = Field(default=4000, gt=0)


class PlannerSettings(ServiceSettings):
    port: int = _port_field("planner")


class ExecutorSettings(ServiceSettings):
    """The executor also reads the estate (metrics, logs, changes, runbooks) from its own database."""

    port: int = _port_field("executor")
    estate_database_url: str = "sqlite:///var/estate.db"
    # Backends: each empty value means "the embedded estate database".
    prometheus_url: str | None = None
    loki_url: str | None = None
    changes_database_url: str | None = None
    knowledge_dir: str = "demo/knowledge"
    backend_timeout_seconds: float = 10.0


class GatekeeperSettings(ServiceSettings):
    port: int = _port_field("gatekeeper")


class VerifierSettings(ServiceSettings):
    port: int = _port_field("verifier")


class ComposerSettings(ServiceSettings):
    port: int = _port_field("composer")


def service_addr(settings: ServiceSettings) -> str:
    """The `host:port` a server with these settings binds to (IPv6 hosts bracketed)."""
    host = settings.bind_host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{settings.port}"
