"""Only real services: the executor's catalogue and the resolution of named services.

The catalogues used here are made up for each test (the estate test loads the demo estate, whose
services it reads from the description, never from a list in this file or in the code)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from services.executor.estate import (
    DEFAULT_ESTATE_DIR,
    estate_metadata,
    load_estate,
    metric_point,
    read_estate_description,
)
from services.executor.service_catalogue import (
    Catalogue,
    ServiceCatalogue,
    catalogue_of,
    confirm_checked,
    plan_service_names,
    resolve_services,
    restrict_plan,
    similarity,
    suggestions_for,
)
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.backends import BackendError
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend
from shared.config import ExecutorSettings
from shared.core.contracts import ToolInvocation
from shared.core.embedded_planner import EmbeddedPlanner

CATALOGUE = Catalogue(names=frozenset({"ledger-api", "ledger-writer", "Search.Gateway", "queue-worker", "auth-svc"}))
NOW = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)


def test_known_names_are_checked_in_the_order_named_and_unknown_ones_get_close_matches():
    coverage = resolve_services(["queue-worker", "ledgr-api", "ledger-api", "zebra-quantum"], CATALOGUE, 10).coverage
    assert coverage.named == ["queue-worker", "ledgr-api", "ledger-api", "zebra-quantum"]
    assert coverage.checked == ["queue-worker", "ledger-api"]
    assert [(u.name, u.suggestions) for u in coverage.unknown] == [("ledgr-api", ["ledger-api"]), ("zebra-quantum", [])]
    assert coverage.partial and not coverage.nothing_known


def test_case_and_separators_do_not_make_a_name_unknown_and_the_catalogue_spelling_is_used():
    resolution = resolve_services(["search.gateway", "Queue_Worker"], CATALOGUE, 10)
    assert resolution.coverage.checked == ["Search.Gateway", "queue-worker"]
    assert resolution.coverage.unknown == []
    assert resolution.callable_name("SEARCH-GATEWAY") == "Search.Gateway"


def test_every_name_unknown_means_nothing_is_known():
    coverage = resolve_services(["ledgr-api"], CATALOGUE, 10).coverage
    assert coverage.nothing_known and coverage.checked == []


def test_the_limit_checks_the_first_known_names_and_reports_the_rest():
    coverage = resolve_services(["auth-svc", "nope-svc", "ledger-api", "ledger-writer", "queue-worker"], CATALOGUE, 2).coverage
    assert coverage.checked == ["auth-svc", "ledger-api"]
    assert coverage.unchecked == ["ledger-writer", "queue-worker"]
    assert [u.name for u in coverage.unknown] == ["nope-svc"] and coverage.limit == 2


def test_a_known_name_without_steps_is_not_checked():
    coverage = resolve_services(["auth-svc", "ledger-api"], CATALOGUE, 10, plannable={"ledger-api"}).coverage
    assert coverage.checked == ["ledger-api"] and coverage.unchecked == ["auth-svc"]


def test_an_unreadable_catalogue_refuses_nothing_and_says_so():
    resolution = resolve_services(["whatever-svc"], Catalogue(available=False, error="down"), 10)
    assert resolution.coverage.checked == ["whatever-svc"] and resolution.coverage.catalogue_unavailable
    assert resolution.callable_name("anything-else") == "anything-else"


def test_tools_may_be_called_only_for_catalogue_services_that_are_not_left_unchecked():
    resolution = resolve_services(["auth-svc", "ledger-api"], CATALOGUE, 1)
    assert resolution.callable_name("auth-svc") == "auth-svc"
    assert resolution.callable_name("ledger-api") is None, "named but beyond the limit"
    assert resolution.callable_name("queue-worker") == "queue-worker", "a dependency the catalogue knows"
    assert resolution.callable_name("query_metrics") is None


@pytest.mark.parametrize(("name", "expected"), [
    ("ledgr-api", ["ledger-api"]),
    ("ledger-apii", ["ledger-api"]),
    ("queue-wrker", ["queue-worker"]),
    ("auth-service", ["auth-svc"]),        # an abbreviated part
    ("search-gw", ["Search.Gateway"]),
    ("billing-api", []),                   # a shared `-api` alone makes nothing alike
    ("foo-worker", []),
    ("schema_version", []),
])
def test_close_matches(name, expected):
    assert suggestions_for(name, CATALOGUE.names) == expected


def test_similarity_ignores_shared_suffixes():
    assert similarity("paymnet-service", "payment-service") > 0.7
    assert similarity("billing-service", "shipping-service") < 0.7


def test_restrict_plan_keeps_steps_of_checked_services_only_in_catalogue_spelling():
    plan = EmbeddedPlanner().plan("search.gateway 和 nope-svc 的 CPU 为什么这么高", NOW)
    named, stepped = plan_service_names(plan)
    assert named == ["search.gateway", "nope-svc"] and stepped == set(named)
    resolution = resolve_services(named, CATALOGUE, 10, stepped)
    restricted = restrict_plan(plan, resolution)
    services = {step.arguments.get("service") for step in restricted.steps}
    assert services == {"Search.Gateway", None}, "the runbook lookup stays, nope-svc's steps are gone"
    assert restricted.services == ["Search.Gateway"]


def test_restrict_plan_runs_nothing_when_every_service_is_unknown():
    plan = EmbeddedPlanner().plan("nope-svc 的 CPU 为什么这么高", NOW)
    named, stepped = plan_service_names(plan)
    assert restrict_plan(plan, resolve_services(named, CATALOGUE, 10, stepped)).steps == []


def test_a_service_no_tool_was_called_for_is_not_checked_in_the_end():
    coverage = resolve_services(["auth-svc", "ledger-api"], CATALOGUE, 10).coverage
    called = [ToolInvocation(invocation_id=1, run_id="r", tool_name="query_metrics", request={"service": "ledger-api"})]
    confirmed = confirm_checked(coverage, called)
    assert confirmed.checked == ["ledger-api"] and confirmed.unchecked == ["auth-svc"]


class _Source:
    source_name = "test"

    def __init__(self, names):
        self.names = names
        self.calls = 0

    def service_names(self):
        self.calls += 1
        if isinstance(self.names, Exception):
            raise self.names
        return self.names


def test_the_catalogue_is_cached_for_its_ttl_and_a_failure_is_not():
    clock = [0.0]
    source = _Source(["a-svc"])
    catalogue = ServiceCatalogue([source], ttl_seconds=10, clock=lambda: clock[0])
    assert catalogue.snapshot().names == {"a-svc"}
    source.names = ["a-svc", "b-svc"]
    assert catalogue.snapshot().names == {"a-svc"} and source.calls == 1
    clock[0] = 11
    assert catalogue.snapshot().names == {"a-svc", "b-svc"}

    failing = ServiceCatalogue([_Source(["x-svc"]), _Source(BackendError("label api down"))])
    snapshot = failing.snapshot()
    assert not snapshot.available and "label api down" in snapshot.error
    assert ServiceCatalogue([]).snapshot().available is False


# --- the embedded estate ---------------------------------------------------------------------------


def test_the_estate_catalogue_is_its_service_table(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=NOW)
    described = {service.name for service in read_estate_description(DEFAULT_ESTATE_DIR).services}
    backends = build_backends(ExecutorSettings(estate_database_url=url))
    assert set(backends.metrics.service_names()) == described
    catalogue = catalogue_of(backends)
    assert catalogue.snapshot().names == described


def test_an_estate_without_a_service_table_lists_the_services_it_has_rows_for(tmp_path: Path):
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    tables = [table for name, table in estate_metadata.tables.items() if name != "service"]
    estate_metadata.create_all(engine, tables=tables)
    with engine.begin() as connection:
        connection.execute(metric_point.insert(), [
            {"service": "old-svc", "metric": "m", "ts": NOW - timedelta(minutes=k), "value": 1.0, "unit": ""}
            for k in range(3)
        ])
    assert SqlMetricsBackend(engine).service_names() == ["old-svc"]
    assert SqlLogsBackend(engine).service_names() == []
