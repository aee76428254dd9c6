"""Settings for every process, read from `ATTEST_*` environment variables and an optional `.env`.

One class per role (DESIGN §6). A role's port is read from `ATTEST_<ROLE>_PORT`, so one `.env`
can hold the ports of all six services without them colliding on a shared `ATTEST_PORT`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any, Literal, Self

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.core.failure_modes import FailureModes, load_failure_modes
from shared.core.signal_semantics import SignalSemantics, load_semantics
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.local_time import DEFAULT_TIME_ZONE, load_zone

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# The evidence tools the demo estate can serve (ExecutorSettings.demo_tools).
DEMO_SOURCE_TOOLS = (QUERY_METRICS, QUERY_LOGS, QUERY_CHANGES, LOOKUP_KNOWLEDGE)

# Servers accept keepalive pings this often (shared/server.py); clients may not ping more often.
MIN_KEEPALIVE_SECONDS = 10.0

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
    # Streams of the services every peer may call (health Watch, reflection) run beside those
    # workers, never on them (shared/stream_limits.py): at most this many per peer address (and
    # certificate identity) and in total, each closed after this long without a message.
    stream_max_per_peer: int = Field(default=4, gt=0)
    stream_max_total: int = Field(default=32, gt=0)
    stream_idle_timeout_seconds: float = Field(default=120.0, gt=0.0)
    # ATTEST_TIME_ZONE: the zone answers show times in and the planner reads 「今天」「10点」 in.
    # Tools, checks and the audit stay in UTC. An unknown name stops the
    # process at start-up: never a silent UTC.
    time_zone: str = DEFAULT_TIME_ZONE
    # ATTEST_RETENTION_DAYS: `attest purge` deletes runs that ended this many days ago (or
    # started then and never ended) when no --older-than is given.
    retention_days: int = Field(default=30, ge=1)
    # ATTEST_SIGNAL_SEMANTICS_FILE: a JSON file of signal kinds (which direction is bad, the name
    # tokens and question words of each), merged over the shipped `shared/core/signal_semantics.json`.
    # A file that cannot be read or has another shape stops the process at start-up.
    signal_semantics_file: str | None = None
    # ATTEST_FAILURE_MODES_FILE: a JSON file of failure mechanisms (docs/failure-modes.md), merged
    # over the shipped `shared/core/failure_modes.json`: a mechanism with the same id is replaced,
    # new ids are added. A file that cannot be read, has another shape or holds a regex that does
    # not compile stops the process at start-up.
    failure_modes_file: str | None = None

    # Mutual TLS between the services (README "Security model"). ATTEST_INSECURE=1 is
    # the only way to plaintext: without it a process needs ATTEST_TLS_CA_FILE (signs every
    # peer), ATTEST_TLS_CERT_FILE and ATTEST_TLS_KEY_FILE (its own identity) or it does not start.
    insecure: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # ATTEST_HEALTH_PORT: a plaintext port serving only grpc.health.v1 (Kubernetes' gRPC probes
    # cannot present a client certificate); 0 = none.
    health_port: int = Field(default=0, ge=0, le=65535)
    # How often readiness is re-checked (databases; the gateway's downstream roles).
    readiness_interval_seconds: float = Field(default=5.0, gt=0.0)
    # Timeout of one readiness check (a database SELECT 1, one downstream Health.Check).
    readiness_timeout_seconds: float = Field(default=2.0, gt=0.0)

    # Connections between the services (README "Deployment"). Clients ping a connection
    # with calls in flight every ATTEST_GRPC_KEEPALIVE_SECONDS and drop it when a ping is not
    # answered within the timeout (a replica that vanished without closing its sockets). Servers
    # close every connection after ATTEST_GRPC_MAX_CONNECTION_AGE_SECONDS, so that clients
    # re-resolve their targets and reach replicas that appeared since; calls in flight on it get
    # the grace to finish (at least a diagnosis's deadline, so that none is cut).
    grpc_keepalive_seconds: float = Field(default=20.0, ge=MIN_KEEPALIVE_SECONDS)
    grpc_keepalive_timeout_seconds: float = Field(default=10.0, gt=0.0)
    grpc_max_connection_age_seconds: float = Field(default=60.0, gt=0.0)
    grpc_max_connection_age_grace_seconds: float = Field(default=70.0, ge=0.0)

    @model_validator(mode="after")
    def _keepalive_timeout_below_interval(self) -> Self:
        if self.grpc_keepalive_timeout_seconds >= self.grpc_keepalive_seconds:
            raise ValueError(
                f"ATTEST_GRPC_KEEPALIVE_TIMEOUT_SECONDS ({self.grpc_keepalive_timeout_seconds:g}) must be below "
                f"ATTEST_GRPC_KEEPALIVE_SECONDS ({self.grpc_keepalive_seconds:g})"
            )
        return self

    @field_validator("time_zone")
    @classmethod
    def _known_time_zone(cls, value: str) -> str:
        load_zone(value)
        return value.strip()

    @field_validator("signal_semantics_file")
    @classmethod
    def _readable_semantics(cls, value: str | None) -> str | None:
        value = value.strip() if value else None
        load_semantics(value)  # SignalSemanticsError (a ValueError) names the file and the problem
        return value

    @field_validator("failure_modes_file")
    @classmethod
    def _readable_failure_modes(cls, value: str | None) -> str | None:
        value = value.strip() if value else None
        load_failure_modes(value)  # FailureModesError (a ValueError) names the file and the field
        return value


class ServiceSettings(CommonSettings):
    """Base of the per-role settings: a process that listens on a port."""

    port: int = Field(default=0, ge=0, le=65535)
    # ATTEST_ALLOWED_CALLERS (comma-separated): the identities (`spiffe://attest/<name>` in the
    # peer certificate) allowed to call this role over mutual TLS. Only the gateway calls roles.
    allowed_callers: Annotated[list[str], NoDecode] = ["gateway"]

    @field_validator("allowed_callers", mode="before")
    @classmethod
    def _caller_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        return value


class GatewaySettings(ServiceSettings):
    """The public entry point: where the five internal services are and how callers authenticate."""

    port: int = _port_field("gateway")
    planner_addr: str = _default_addr("planner")
    executor_addr: str = _default_addr("executor")
    gatekeeper_addr: str = _default_addr("gatekeeper")
    verifier_addr: str = _default_addr("verifier")
    composer_addr: str = _default_addr("composer")
    # ATTEST_AUTH_TOKEN: one bearer token, for the principal `default`. None (and no tokens file)
    # disables authentication: every caller is `default` (local development only).
    auth_token: str | None = None
    # ATTEST_AUTH_TOKENS_FILE: one `PRINCIPAL sha256:<hex>` line per caller (`attest hash-token`);
    # a bad file stops the gateway at start-up. With ATTEST_AUTH_TOKEN too, both are accepted.
    auth_tokens_file: str | None = None
    diagnosis_timeout_seconds: float = Field(default=60.0, gt=0.0)
    # The limits at the edge, each ATTEST_<NAME> (README "Limits").
    max_query_chars: int = Field(default=4000, gt=0)
    # Characters of a request's session_id / client_label / run_id.
    max_session_id_chars: int = Field(default=128, gt=0)
    max_client_label_chars: int = Field(default=200, gt=0, le=200)  # the column's width
    max_run_id_chars: int = Field(default=128, gt=0)
    # Per-principal quotas: diagnoses running at once, and started in any 60 seconds.
    max_runs_in_flight_per_principal: int = Field(default=4, gt=0)
    max_runs_per_minute_per_principal: int = Field(default=30, gt=0)
    # The RetryInfo delay of a refusal for too many runs in flight (seconds).
    quota_busy_retry_seconds: float = Field(default=5.0, gt=0.0)
    # GetRun's paged full audit: items (events + invocations) per page when the caller names no
    # page_size, the most a page_size may ask (larger is lowered to it), and the bytes of one page
    # (a page stops early rather than pass it; the client's default message limit is 4 MB).
    get_run_default_page_size: int = Field(default=50, gt=0)
    get_run_max_page_size: int = Field(default=500, gt=0)
    get_run_max_page_bytes: int = Field(default=1_000_000, ge=10_000)
    # GetRun's SUMMARY view: characters of the answer it carries (the rest is cut, and says so).
    run_summary_max_answer_chars: int = Field(default=20_000, gt=0)
    # ListRuns: runs per page when the caller names no page_size, and the most a
    # page_size may ask (larger is lowered to it).
    list_runs_default_page_size: int = Field(default=20, gt=0)
    list_runs_max_page_size: int = Field(default=100, gt=0)
    # Diagnose's request_id: its characters (at most the column's width), and
    # how long an id names its run (after that, or once its run was cancelled, it starts a new run).
    max_request_id_chars: int = Field(default=128, gt=0, le=128)
    request_id_retention_hours: float = Field(default=24.0, gt=0.0)
    # No run is left RUNNING: the gateway stamps a heartbeat on its running runs every
    # `run_heartbeat_seconds`; any replica ends a run whose heartbeat is older than
    # `run_reap_after_seconds` as RUN_INTERRUPTED (its gateway died), at start-up and on every beat.
    run_heartbeat_seconds: float = Field(default=10.0, gt=0.0)
    run_reap_after_seconds: float = Field(default=30.0, gt=0.0)
    # The gateway's public port: plaintext unless a certificate and key are given; with a client
    # CA as well, frontends must present a certificate signed by it.
    public_tls_cert_file: str | None = Field(
        default=None, validation_alias=AliasChoices("ATTEST_GATEWAY_PUBLIC_TLS_CERT_FILE"))
    public_tls_key_file: str | None = Field(
        default=None, validation_alias=AliasChoices("ATTEST_GATEWAY_PUBLIC_TLS_KEY_FILE"))
    public_tls_client_ca_file: str | None = Field(
        default=None, validation_alias=AliasChoices("ATTEST_GATEWAY_PUBLIC_TLS_CLIENT_CA_FILE"))


# Steps per plan (ATTEST_MAX_PLAN_STEPS): the executor refuses a longer plan and the planner keeps
# its plans within the same number. Ten services' three checks and a runbook
# lookup fit; the demo's plans have three to four steps.
DEFAULT_MAX_PLAN_STEPS = 32


class PlannerSettings(ServiceSettings):
    port: int = _port_field("planner")
    # A plan is cut to its first ATTEST_MAX_PLAN_STEPS steps (the executor's limit; set both alike).
    max_plan_steps: int = Field(default=DEFAULT_MAX_PLAN_STEPS, ge=1, le=200)


class PromqlSignal(BaseModel):
    """One configured golden signal: a PromQL template and the unit of its values."""

    query: str = Field(min_length=1, max_length=2000)
    unit: str = Field(default="", max_length=32)

    @field_validator("query")
    @classmethod
    def _has_selector(cls, value: str) -> str:
        if "{selector}" not in value:
            raise ValueError("a signal template must contain {selector} (the service matcher)")
        return value


class ExecutorSettings(ServiceSettings):
    """The executor also reads the estate (metrics, logs, changes, runbooks) from its own database."""

    # Tokens, passwords and header values must not be echoed by a validation error.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    port: int = _port_field("executor")
    estate_database_url: str = "sqlite:///var/estate.db"
    # Backends: each empty value means "the embedded estate database".
    prometheus_url: str | None = None
    loki_url: str | None = None
    changes_database_url: str | None = None
    knowledge_dir: str = "demo/knowledge"
    backend_timeout_seconds: float = 10.0
    # How Prometheus / Loki are reached (README "Prometheus and Loki"). Label
    # lists and headers are comma-separated (`service,job,app`; `X-Scope-OrgID=tenant-a,X-A=b`);
    # a secret is given inline or as a `_FILE` read at each request, never both. An unreachable
    # backend is re-probed every `backend_recheck_seconds`.
    prometheus_service_labels: Annotated[list[str], NoDecode] = ["service"]
    prometheus_bearer_token: SecretStr | None = None
    prometheus_bearer_token_file: str | None = None
    prometheus_basic_auth_user: str | None = None
    prometheus_basic_auth_password: SecretStr | None = None
    prometheus_basic_auth_password_file: str | None = None
    prometheus_ca_file: str | None = None
    prometheus_headers: Annotated[dict[str, SecretStr], NoDecode] = {}
    # The finest step ever asked of Prometheus (e.g. its scrape interval); None: as the tool asks.
    prometheus_step_seconds: int | None = Field(default=None, ge=1, le=3600)
    # How series are read (README "Prometheus and Loki"): the labels that
    # name one pod/instance (the top contributor is named by the first present), the labels that
    # carry an HTTP/gRPC status and the pattern of its error values, and PromQL templates of
    # golden signals queried by name before anything else (JSON: {"name": {"query": "...",
    # "unit": "percent"}}; `{selector}` is the service matcher, `{range}` the rate window). A
    # template named like a built-in signal (request_rate, error_ratio, latency_p99, cpu,
    # memory, ...) replaces it.
    prometheus_instance_labels: Annotated[list[str], NoDecode] = ["pod", "instance"]
    prometheus_status_labels: Annotated[list[str], NoDecode] = ["status", "code", "status_code"]
    prometheus_error_status_pattern: str = "5.."
    prometheus_signals: dict[str, PromqlSignal] = {}
    loki_service_labels: Annotated[list[str], NoDecode] = ["service"]
    # The stream label holding a line's level; a stream without it has each line's level read from
    # the line itself (shared/core/log_levels.py).
    loki_level_label: str = Field(default="level", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    loki_bearer_token: SecretStr | None = None
    loki_bearer_token_file: str | None = None
    loki_basic_auth_user: str | None = None
    loki_basic_auth_password: SecretStr | None = None
    loki_basic_auth_password_file: str | None = None
    loki_ca_file: str | None = None
    loki_headers: Annotated[dict[str, SecretStr], NoDecode] = {}
    backend_recheck_seconds: float = Field(default=15.0, gt=0.0)
    # At most this many of the services a question names are checked (ATTEST_MAX_SERVICES_PER_
    # QUESTION); the answer names every one that was not, and is never 「可信度：高」 then.
    max_services_per_question: int = Field(default=10, ge=1, le=50)
    # A triage question (「现在线上哪个服务有问题？」: no service named) checks at most this many of
    # the catalogue's services (ATTEST_TRIAGE_MAX_SERVICES), and fewer when their steps would not
    # fit in max_plan_steps; the answer names the services it did not check.
    triage_max_services: int = Field(default=12, ge=1, le=50)
    # No silent demo data (README "Prometheus and Loki"): once Prometheus or
    # Loki is configured, a tool with no backend of its own (logs without Loki, metrics without
    # Prometheus, changes without `changes_database_url`, knowledge from the shipped demo
    # directory) is disabled, unless it is named here, which serves it from the demo estate (or
    # the demo knowledge directory) again: `ATTEST_DEMO_TOOLS=query_logs,query_changes`, or `all`.
    # With no real backend configured everything is the demo estate and this has no effect.
    demo_tools: Annotated[list[str], NoDecode] = []
    # Secrets never stored (shared/redaction.py): every tool call's request,
    # result and error is redacted before it is persisted or shown to a model.
    # ATTEST_REDACTION_PATTERNS: a JSON list of extra regular expressions (the whole match, or
    # its first group, is replaced); one that does not compile stops the executor at start-up.
    redaction_patterns: list[str] = []
    # ATTEST_REDACTION_BUILTINS=false keeps only the configured patterns.
    redaction_builtins: bool = True
    # What ExecutePlan accepts (README "Limits"); beyond it INVALID_ARGUMENT
    # naming the step, the argument and the limit, before any tool runs.
    # Steps per plan (the planner cuts its plans to the same ATTEST_MAX_PLAN_STEPS).
    max_plan_steps: int = Field(default=DEFAULT_MAX_PLAN_STEPS, ge=1, le=200)
    # The JSON size in bytes of one tool argument's value.
    max_tool_argument_bytes: int = Field(default=1024, ge=64, le=1024 * 1024)
    # The JSON size in bytes of one step's arguments together.
    max_tool_request_bytes: int = Field(default=4096, ge=256, le=4 * 1024 * 1024)
    # The longest start..end window a step may query, in hours (the tools serve at most 7 days).
    max_query_window_hours: float = Field(default=168.0, gt=0.0, le=24.0 * 366)
    # The largest `limit` or `top_k` a step may ask for.
    max_result_limit: int = Field(default=500, ge=1, le=100_000)
    # What one run may hold, all rounds together; beyond it RESOURCE_EXHAUSTED (ExecutePlan, RunAgent)
    # or, for an agent already running, no further tool call and an answer that says so.
    # Tool invocations per run.
    max_run_invocations: int = Field(default=100, ge=1, le=100_000)
    # Bytes of evidence (tool results) stored per run; GetRun returns them, so keep it well below
    # the clients' message limit (gRPC's default is 4 MiB).
    max_run_evidence_bytes: int = Field(default=2 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)


    @field_validator(
        "prometheus_service_labels", "loki_service_labels", "prometheus_instance_labels", "prometheus_status_labels",
        mode="before",
    )
    @classmethod
    def _label_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list):
            value = [str(part).strip() for part in value if str(part).strip()]
            if not value:
                raise ValueError("at least one label name is needed")
            for label in value:
                if not _LABEL_NAME.fullmatch(label):
                    raise ValueError(f"{label!r} is not a label name")
        return value

    @field_validator("demo_tools", mode="before")
    @classmethod
    def _demo_tool_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list):
            value = list(dict.fromkeys(str(part).strip() for part in value if str(part).strip()))
            if "all" in value:
                return list(DEMO_SOURCE_TOOLS)
            for tool in value:
                if tool not in DEMO_SOURCE_TOOLS:
                    raise ValueError(f"{tool!r} is not a tool served from the demo estate; "
                                     f"use {', '.join(DEMO_SOURCE_TOOLS)} or all")
        return value

    @field_validator("prometheus_headers", "loki_headers", mode="before")
    @classmethod
    def _header_map(cls, value: Any) -> Any:
        if isinstance(value, str):
            headers: dict[str, str] = {}
            for number, item in enumerate((part.strip() for part in value.split(",")), start=1):
                if not item:
                    continue
                name, sep, header_value = item.partition("=")
                if not sep or not name.strip():
                    # The item may hold a secret: say where, never what.
                    raise ValueError(f"headers are NAME=VALUE pairs separated by commas; item {number} is not")
                headers[name.strip()] = header_value.strip()
            return headers
        return value

    @field_validator("prometheus_headers", "loki_headers")
    @classmethod
    def _header_names(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in value:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r} is not an HTTP header name")
        return value


class GatekeeperSettings(ServiceSettings):
    port: int = _port_field("gatekeeper")


class VerifierSettings(ServiceSettings):
    port: int = _port_field("verifier")


class ComposerSettings(ServiceSettings):
    port: int = _port_field("composer")


class ModelSettings(BaseSettings):
    """How one role reaches its model (DESIGN §5). Read through `model_settings_for(role)`:
    `ATTEST_<ROLE>_MODEL_<FIELD>` wins over the global `ATTEST_MODEL_<FIELD>`, which wins over
    these defaults. The default provider is the embedded engine, so nothing needs a network."""

    model_config = SettingsConfigDict(
        env_prefix="ATTEST_MODEL_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        protected_namespaces=(),  # `model` is a field here, not pydantic's namespace
    )

    provider: Literal["embedded", "openai"] = "embedded"
    # None: the `openai` package's default endpoint.
    base_url: str | None = None
    model: str = ""
    # Local servers (llama.cpp, vLLM, Ollama) accept any key; None sends a placeholder.
    api_key: SecretStr | None = None
    timeout_seconds: float = Field(default=60.0, gt=0.0)
    max_tokens: int = Field(default=1024, gt=0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    # Model turns that may call tools before the final answer is requested without tools.
    max_tool_steps: int = Field(default=6, ge=1, le=50)
    # Technical attempts per model turn; only transport errors and timeouts are retried.
    max_attempts: int = Field(default=2, ge=1, le=5)
    # Whether the server accepts `{"type": "json_object", "schema": …}` (llama.cpp does; the
    # OpenAI-style `json_schema` format is not used). False: plain JSON instructions only.
    json_schema_format: bool = False


MODEL_ROLES: tuple[str, ...] = ("planner", "executor", "verifier", "composer")


class ModelConfigError(ValueError):
    """The model settings of a role cannot work (e.g. provider openai without a model name)."""


def model_settings_for(role: str) -> ModelSettings:
    """The model settings of `role`: per-role variables over global ones over defaults."""
    if role not in MODEL_ROLES:
        raise ModelConfigError(f"unknown model role {role!r}; expected one of {', '.join(MODEL_ROLES)}")
    global_settings = ModelSettings()
    role_settings = ModelSettings(_env_prefix=f"ATTEST_{role.upper()}_MODEL_")
    values = global_settings.model_dump()
    values.update(role_settings.model_dump(include=role_settings.model_fields_set))
    settings = ModelSettings.model_validate(values)
    if settings.provider == "openai" and not settings.model:
        raise ModelConfigError(
            f"the {role} uses provider openai but no model is named: set ATTEST_{role.upper()}_MODEL_MODEL "
            "or ATTEST_MODEL_MODEL"
        )
    return settings


def configured_time_zone() -> str:
    """ATTEST_TIME_ZONE (validated) for code that is handed no zone by its process's wiring."""
    return CommonSettings().time_zone


@lru_cache(maxsize=1)
def configured_signal_semantics() -> SignalSemantics:
    """The signal semantics with ATTEST_SIGNAL_SEMANTICS_FILE merged in (read once per process;
    the settings were validated at start-up)."""
    return load_semantics(CommonSettings().signal_semantics_file)


@lru_cache(maxsize=1)
def configured_failure_modes() -> FailureModes:
    """The failure-mode catalogue with ATTEST_FAILURE_MODES_FILE merged in (read once per process;
    the settings were validated at start-up)."""
    return load_failure_modes(CommonSettings().failure_modes_file)


def service_addr(settings: ServiceSettings) -> str:
    """The `host:port` a server with these settings binds to (IPv6 hosts bracketed)."""
    host = settings.bind_host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{settings.port}"
