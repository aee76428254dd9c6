"""The demo estate: a compact JSON description of services and incidents (data, in `demo/estate/`)
expanded deterministically into metric points, log lines and change records in the estate
database — a database of its own, separate from the runs database.

    python -m services.executor.estate load [--url URL] [--dir DIR] [--anchor ISO] [--seed N]

Expansion is seeded (the same description, seed and anchor give the same rows) and every random
stream is derived from (seed, service, metric or template), so adding an incident never changes
the rows of another series. Loading replaces what was there before.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
)
from sqlalchemy.types import TypeDecorator

DEFAULT_ESTATE_DIR = Path(__file__).resolve().parents[2] / "demo" / "estate"
DEFAULT_ESTATE_URL = "sqlite:///var/estate.db"


# --- schema ------------------------------------------------------------------------------------


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every dialect (SQLite stores them naive, in UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("estate timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


estate_metadata = MetaData()

metric_point = Table(
    "metric_point",
    estate_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("service", String(128), nullable=False),
    Column("metric", String(128), nullable=False),
    Column("ts", UtcDateTime(), nullable=False),
    Column("value", Float, nullable=False),
    Column("unit", String(32), nullable=False),
    Index("ix_metric_point_series", "service", "metric", "ts"),
)

log_line = Table(
    "log_line",
    estate_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("service", String(128), nullable=False),
    Column("ts", UtcDateTime(), nullable=False),
    Column("level", String(8), nullable=False),
    Column("host", String(128), nullable=False),
    Column("message", Text, nullable=False),
    Index("ix_log_line_service_ts", "service", "ts"),
)

# The catalogue of services: the executor resolves the names a question uses against it
# before any tool runs. Estates written before this table existed fall back to the services that
# have metric points or log lines (`SqlMetricsBackend.service_names`).
service_catalogue = Table(
    "service",
    estate_metadata,
    Column("name", String(128), primary_key=True),
)

change_record = Table(
    "change_record",
    estate_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("service", String(128), nullable=False),
    Column("ts", UtcDateTime(), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("summary", Text, nullable=False),
    Column("author", String(128), nullable=False),
    Index("ix_change_record_service_ts", "service", "ts"),
)


# --- the description (demo/estate/*.json) ------------------------------------------------------


class EstateError(Exception):
    """The estate description cannot be read or is inconsistent."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricDefinition(_Strict):
    unit: str
    decimals: int = Field(default=1, ge=0, le=6)
    min: float = 0.0
    max: float | None = None


class ServiceMetric(_Strict):
    baseline: float
    noise: float = Field(default=0.0, ge=0.0)  # standard deviation, in the metric's unit


class LogTemplate(_Strict):
    level: Literal["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]
    template: str = Field(min_length=1)
    rate_per_min: float = Field(default=0.0, ge=0.0, le=120.0)
    # Incident templates only: one line at each of these minutes after the incident start.
    at_minutes: list[int] = Field(default_factory=list)
    # Incident templates only: the rate reaches rate_per_min over this many minutes.
    ramp_minutes: int = Field(default=0, ge=0)
    delay_minutes: int = Field(default=0, ge=0)
    service: str | None = None  # incident templates may write into another service's log


class RoutineChange(_Strict):
    """A change unrelated to any incident (the everyday background of a change log)."""

    minutes_ago: int = Field(ge=0)  # before the anchor
    kind: str
    summary: str
    author: str


class ServiceDescription(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$")
    hosts: list[str] = Field(min_length=1)
    metrics: dict[str, ServiceMetric] = Field(min_length=1)
    logs: list[LogTemplate] = Field(default_factory=list)
    changes: list[RoutineChange] = Field(default_factory=list)


class MetricEffect(_Strict):
    metric: str
    shape: Literal["step", "ramp", "spike", "sawtooth"]
    target: float
    ramp_minutes: int = Field(default=5, ge=0)
    recover_minutes: int = Field(default=3, ge=0)
    period_minutes: int = Field(default=20, ge=2)  # sawtooth only
    delay_minutes: int = Field(default=0, ge=0)
    noise: float | None = Field(default=None, ge=0.0)
    service: str | None = None


class ChangeDescription(_Strict):
    offset_minutes: int  # relative to the incident start; negative = before it
    kind: str
    summary: str
    author: str
    service: str | None = None


class IncidentDescription(_Strict):
    id: str
    title: str = ""
    service: str
    kind: str
    start_offset_minutes: int = Field(ge=0)  # minutes before the anchor
    duration_minutes: int = Field(ge=1)
    metrics: list[MetricEffect] = Field(default_factory=list)
    logs: list[LogTemplate] = Field(default_factory=list)
    changes: list[ChangeDescription] = Field(default_factory=list)


class EstateDescription(_Strict):
    history_minutes: int = Field(default=120, ge=60, le=7 * 24 * 60)
    metrics: dict[str, MetricDefinition]
    services: list[ServiceDescription] = Field(min_length=1)
    incidents: list[IncidentDescription] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references_resolve(self) -> EstateDescription:
        services = {s.name: s for s in self.services}
        if len(services) != len(self.services):
            raise ValueError("service names must be unique")
        for service in self.services:
            for metric in service.metrics:
                if metric not in self.metrics:
                    raise ValueError(f"service {service.name}: metric {metric!r} is not defined under 'metrics'")
        for incident in self.incidents:
            overrides: list[MetricEffect | LogTemplate | ChangeDescription] = [
                *incident.metrics, *incident.logs, *incident.changes]
            targets = [incident.service] + [item.service for item in overrides if item.service]
            for name in targets:
                if name not in services:
                    raise ValueError(f"incident {incident.id}: unknown service {name!r}")
            for effect in incident.metrics:
                owner = services[effect.service or incident.service]
                if effect.metric not in owner.metrics:
                    raise ValueError(f"incident {incident.id}: service {owner.name} has no metric {effect.metric!r}")
        return self


def read_estate_description(estate_dir: Path) -> EstateDescription:
    """`services.json` plus every `incidents/*.json` (in name order)."""
    estate_dir = Path(estate_dir)
    if not estate_dir.is_dir():
        raise EstateError(f"estate directory not found: {estate_dir}")
    services_file = estate_dir / "services.json"
    if not services_file.is_file():
        raise EstateError(f"estate directory has no services.json: {estate_dir}")
    document = _read_json(services_file)
    if not isinstance(document, dict):
        raise EstateError(f"{services_file}: expected a JSON object")
    incidents: list[Any] = list(document.pop("incidents", []))
    incident_dir = estate_dir / "incidents"
    if incident_dir.is_dir():
        incidents += [_read_json(path) for path in sorted(incident_dir.glob("*.json"))]
    try:
        description = EstateDescription.model_validate({**document, "incidents": incidents})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise EstateError(f"invalid estate description in {estate_dir}: {where}: {first.get('msg')}") from None
    for template in _all_templates(description):
        _check_template(template)
    return description


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EstateError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except OSError as exc:
        raise EstateError(f"{path}: cannot be read ({exc.strerror})") from None


# --- log message templates ---------------------------------------------------------------------
# Placeholders: {trace_id} {span_id} {uuid} {hex:N} {int:A:B} {float:A:B} {choice:a|b|c} {host}
# {service} {ip}. Other braces (e.g. JSON in a message) are left alone.

_PLACEHOLDER = re.compile(r"\{(trace_id|span_id|uuid|hex|int|float|choice|host|service|ip)(?::([^{}]*))?\}")
_SUSPICIOUS = re.compile(r"\{[a-z_]+(?::[^{}]*)?\}")


def _check_template(template: LogTemplate) -> None:
    for match in _SUSPICIOUS.finditer(template.template):
        if not _PLACEHOLDER.fullmatch(match.group(0)):
            raise EstateError(f"unknown placeholder {match.group(0)} in log template {template.template[:60]!r}")
    for match in _PLACEHOLDER.finditer(template.template):
        kind, arg = match.group(1), match.group(2)
        try:
            if kind == "int":
                low, high = (int(x) for x in arg.split(":"))
                assert low <= high
            elif kind == "float":
                low_f, high_f = (float(x) for x in arg.split(":"))
                assert low_f <= high_f
            elif kind == "hex":
                assert int(arg) > 0
            elif kind == "choice":
                assert arg and all(arg.split("|"))
        except (AttributeError, ValueError, AssertionError):
            raise EstateError(f"bad placeholder {match.group(0)} in log template {template.template[:60]!r}") from None


def _render(template: str, rng: random.Random, service: str, host: str) -> str:
    def replace(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2)
        if kind == "trace_id":
            return f"{rng.getrandbits(128):032x}"
        if kind == "span_id":
            return f"{rng.getrandbits(64):016x}"
        if kind == "uuid":
            raw = f"{rng.getrandbits(128):032x}"
            return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
        if kind == "hex":
            width = int(arg)
            return f"{rng.getrandbits(4 * width):0{width}x}"
        if kind == "int":
            low, high = (int(x) for x in arg.split(":"))
            return str(rng.randint(low, high))
        if kind == "float":
            low_f, high_f = (float(x) for x in arg.split(":"))
            return f"{rng.uniform(low_f, high_f):.2f}"
        if kind == "choice":
            options: list[str] = arg.split("|")
            return rng.choice(options)
        if kind == "host":
            return host
        if kind == "service":
            return service
        return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"

    return _PLACEHOLDER.sub(replace, template)


def _all_templates(description: EstateDescription) -> Iterator[LogTemplate]:
    for service in description.services:
        yield from service.logs
    for incident in description.incidents:
        yield from incident.logs


# --- expansion ---------------------------------------------------------------------------------


def _poisson(rng: random.Random, rate: float) -> int:
    if rate <= 0:
        return 0
    if rate > 30:  # normal approximation keeps large rates cheap
        return max(0, round(rng.gauss(rate, math.sqrt(rate))))
    limit, k, product = math.exp(-rate), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _effect_level(effect: MetricEffect, baseline: float, minute: int, start: int, end: int) -> float | None:
    """The level an incident imposes at `minute` (minutes from history start), None if none."""
    onset = start + effect.delay_minutes
    if minute < onset:
        return None
    rise = max(effect.ramp_minutes, 1)
    if effect.shape == "sawtooth":
        if minute >= end:
            return None
        phase = (minute - onset) % effect.period_minutes
        return baseline + (effect.target - baseline) * (phase + 1) / effect.period_minutes
    if effect.shape == "spike":
        hold_end = end
        if minute < hold_end:
            return effect.target
        decay = minute - hold_end
        return baseline + (effect.target - baseline) * (1 - (decay + 1) / 4) if decay < 3 else None
    if minute < end:
        if effect.shape == "step" or minute - onset >= rise:
            return effect.target
        return baseline + (effect.target - baseline) * (minute - onset + 1) / rise
    recovered = minute - end
    if recovered < effect.recover_minutes:
        return effect.target + (baseline - effect.target) * (recovered + 1) / (effect.recover_minutes + 1)
    return None


def _metric_rows(description: EstateDescription, history_start: datetime, seed: int) -> Iterator[dict[str, Any]]:
    minutes = description.history_minutes
    for service in description.services:
        for metric_name, metric in service.metrics.items():
            definition = description.metrics[metric_name]
            effects = [
                (incident, effect)
                for incident in description.incidents
                for effect in incident.metrics
                if effect.metric == metric_name and (effect.service or incident.service) == service.name
            ]
            rng = random.Random(f"{seed}:metric:{service.name}:{metric_name}")
            for minute in range(minutes + 1):
                level, noise = metric.baseline, metric.noise
                for incident, effect in effects:
                    start = minutes - incident.start_offset_minutes
                    imposed = _effect_level(effect, metric.baseline, minute, start, start + incident.duration_minutes)
                    if imposed is not None:
                        level = imposed
                        noise = effect.noise if effect.noise is not None else metric.noise
                value = rng.gauss(level, noise) if noise > 0 else level
                value = max(definition.min, value)
                if definition.max is not None:
                    value = min(definition.max, value)
                yield {
                    "service": service.name,
                    "metric": metric_name,
                    "ts": history_start + timedelta(minutes=minute),
                    "value": round(value, definition.decimals),
                    "unit": definition.unit,
                }


def _template_lines(
    template: LogTemplate, service: ServiceDescription, rng: random.Random, history_start: datetime,
    minutes: int, active: tuple[int, int] | None,
) -> Iterator[dict[str, Any]]:
    """Lines of one template: at a Poisson rate per minute, and/or once at listed minutes."""
    first, last = active if active else (0, minutes)
    first += template.delay_minutes
    for minute in range(max(first, 0), min(last, minutes)):
        rate = template.rate_per_min
        if template.ramp_minutes:
            rate *= min(1.0, (minute - first + 1) / template.ramp_minutes)
        for _ in range(_poisson(rng, rate)):
            yield _line(template, service, rng, history_start, minute, rng.randint(0, 59))
    if active:
        for offset in template.at_minutes:
            minute = active[0] + offset
            if 0 <= minute < minutes:
                yield _line(template, service, rng, history_start, minute, rng.randint(0, 59))


def _line(template: LogTemplate, service: ServiceDescription, rng: random.Random, history_start: datetime,
          minute: int, second: int) -> dict[str, Any]:
    host = rng.choice(service.hosts)
    return {
        "service": service.name,
        "ts": history_start + timedelta(minutes=minute, seconds=second),
        "level": template.level,
        "host": host,
        "message": _render(template.template, rng, service.name, host),
    }


def _log_rows(description: EstateDescription, history_start: datetime, seed: int) -> list[dict[str, Any]]:
    minutes = description.history_minutes
    services = {s.name: s for s in description.services}
    rows: list[dict[str, Any]] = []
    for service in description.services:
        for index, template in enumerate(service.logs):
            rng = random.Random(f"{seed}:log:{service.name}:{index}")
            rows += _template_lines(template, service, rng, history_start, minutes, None)
    for incident in description.incidents:
        start = minutes - incident.start_offset_minutes
        for index, template in enumerate(incident.logs):
            service = services[template.service or incident.service]
            rng = random.Random(f"{seed}:incident-log:{incident.id}:{index}")
            rows += _template_lines(template, service, rng, history_start, minutes, (start, start + incident.duration_minutes))
    rows.sort(key=lambda row: (row["ts"], row["service"], row["message"]))
    return rows


def _change_rows(description: EstateDescription, history_start: datetime) -> list[dict[str, Any]]:
    anchor = history_start + timedelta(minutes=description.history_minutes)
    rows = [
        {
            "service": service.name,
            "ts": anchor - timedelta(minutes=change.minutes_ago),
            "kind": change.kind,
            "summary": change.summary,
            "author": change.author,
        }
        for service in description.services
        for change in service.changes
        if change.minutes_ago <= description.history_minutes
    ]
    for incident in description.incidents:
        start = description.history_minutes - incident.start_offset_minutes
        for change in incident.changes:
            rows.append({
                "service": change.service or incident.service,
                "ts": history_start + timedelta(minutes=start + change.offset_minutes),
                "kind": change.kind,
                "summary": change.summary,
                "author": change.author,
            })
    rows.sort(key=lambda row: (row["ts"], row["service"]))
    return rows


def _floor_minute(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def load_estate(url: str, estate_dir: Path, anchor: datetime | None = None, seed: int = 7) -> dict[str, Any]:
    """Expand the description in `estate_dir` into the estate database at `url`, replacing its
    previous contents. The newest metric point is at `anchor` (default: now, floored to the
    minute). Returns the counts written."""
    description = read_estate_description(Path(estate_dir))
    anchor = _floor_minute(anchor or datetime.now(UTC))
    history_start = anchor - timedelta(minutes=description.history_minutes)
    metrics = list(_metric_rows(description, history_start, seed))
    logs = _log_rows(description, history_start, seed)
    changes = _change_rows(description, history_start)

    engine = create_estate_engine(url)
    try:
        with engine.begin() as connection:
            # Replace, not append: the estate is rebuilt from its description every time.
            estate_metadata.drop_all(connection)
            estate_metadata.create_all(connection)
            services = [{"name": service.name} for service in description.services]
            for table, rows in ((service_catalogue, services), (metric_point, metrics), (log_line, logs),
                                (change_record, changes)):
                if rows:
                    connection.execute(table.insert(), rows)
    finally:
        engine.dispose()
    return {
        "services": len(description.services),
        "incidents": len(description.incidents),
        "metric_points": len(metrics),
        "log_lines": len(logs),
        "change_records": len(changes),
        "anchor": anchor.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": seed,
    }


def create_estate_engine(url: str) -> Engine:
    """An engine for the estate database; a SQLite file's folder is created if missing."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url[len("sqlite:///"):]).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return create_engine(url)


# --- CLI ---------------------------------------------------------------------------------------


def _default_url() -> str:
    try:
        from shared.config import ExecutorSettings

        return ExecutorSettings().estate_database_url
    except Exception:  # settings unavailable: fall back to the documented variable and default
        return os.environ.get("ATTEST_ESTATE_DATABASE_URL", DEFAULT_ESTATE_URL)


def _parse_anchor(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 timestamp: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.executor.estate", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    load = commands.add_parser("load", help="expand the estate description into the estate database")
    load.add_argument("--url", default=None, help="estate database URL (default: ATTEST_ESTATE_DATABASE_URL or sqlite:///var/estate.db)")
    load.add_argument("--dir", type=Path, default=DEFAULT_ESTATE_DIR, help="estate description directory")
    load.add_argument("--anchor", type=_parse_anchor, default=None, help="time of the newest point (default: now)")
    load.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    url = args.url or _default_url()
    try:
        counts = load_estate(url, args.dir, args.anchor, args.seed)
    except EstateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"estate: loaded into {url}: {counts['services']} services, {counts['incidents']} incidents, "
        f"{counts['metric_points']} metric points, {counts['log_lines']} log lines, "
        f"{counts['change_records']} change records (anchor {counts['anchor']}, seed {counts['seed']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
