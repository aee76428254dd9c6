"""SQL statements become spans of the provider passed in, once per statement."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text

from shared.db.engine import make_engine
from shared.telemetry import init_telemetry, instrument_engine, shutdown_telemetry


class StartedSpans(SpanProcessor):
    """Counts started spans: a duplicate listener starts a span that may never be finished."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_start(self, span, parent_context=None) -> None:
        self.names.append(span.name)


@pytest.fixture()
def provider_and_spans():
    telemetry = init_telemetry("telemetry-test", None)
    provider = telemetry.tracer_provider
    exporter = InMemorySpanExporter()
    started = StartedSpans()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(started)
    yield provider, exporter, started
    shutdown_telemetry(telemetry)


def test_init_telemetry_names_the_service(provider_and_spans):
    provider, _, _ = provider_and_spans
    assert provider.resource.attributes[SERVICE_NAME] == "telemetry-test"


def test_each_engine_traced_once_even_when_instrumented_twice(tmp_path, provider_and_spans):
    provider, exporter, started = provider_and_spans
    engines = [make_engine(f"sqlite:///{tmp_path / name}.db") for name in ("attest", "estate")]
    try:
        for engine in engines:
            instrument_engine(engine, provider)
            instrument_engine(engine, provider)
        for engine in engines:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        spans = exporter.get_finished_spans()
        # One span per statement and nothing else: no span per pool checkout ("connect").
        assert len(spans) == 2, [s.name for s in spans]
        assert all(s.attributes.get("db.statement", "").startswith("SELECT 1") for s in spans)
        assert len(started.names) == 2, started.names
    finally:
        for engine in engines:
            engine.dispose()


def test_pool_use_is_read_from_the_pool_when_metrics_are_collected(tmp_path, provider_and_spans):
    from shared.telemetry import _pool_usage

    provider, _, _ = provider_and_spans
    engine = make_engine(f"sqlite:///{tmp_path / 'pool.db'}")
    instrument_engine(engine, provider)

    def usage() -> dict[str, int]:
        # This engine's pool is named by its connection string.
        return {o.attributes["state"]: o.value for o in _pool_usage(None) if str(tmp_path) in str(o.attributes["pool.name"])}

    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
            assert usage() == {"used": 1, "idle": 0}
        assert usage() == {"used": 0, "idle": 1}
    finally:
        engine.dispose()
