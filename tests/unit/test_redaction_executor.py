"""Secrets never stored, through the executor's own path: a log line carrying a
database password is seeded into the estate, the executor's ToolRunner queries it into a real
SQLite audit store, and then

- the result the agent (and a model) reads, the stored row and the database file hold the line
  with the password replaced by [REDACTED], the rest of the line as logged;
- a citation whose excerpt is taken from the redacted line passes the gatekeeper (the excerpt
  check reads the same redacted row), one quoting the password does not;
- arguments and error messages carrying credentials are stored redacted as well.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate
from services.executor.servicer import ToolRunner
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.backends import BackendError, ToolBackends
from services.executor.tools.registry import build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from services.gatekeeper.engine import check_executor_output
from shared.config import ExecutorSettings
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from tests.estate_seed import seed_log_line

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
SERVICE = "payment-service"
PASSWORD = "Tr0ub4dor-xyzzy-42"
SECRET_LINE = ("HikariPool-1 - Exception during pool initialization: connection to "
               f"postgres://orders:{PASSWORD}@orders-db:5432/orders refused")
REDACTED_LINE = ("HikariPool-1 - Exception during pool initialization: connection to "
                 "postgres://orders:[REDACTED]@orders-db:5432/orders refused")


@pytest.fixture()
def audit(tmp_path: Path):
    estate_url, audit_url = f"sqlite:///{tmp_path / 'estate.db'}", f"sqlite:///{tmp_path / 'attest.db'}"
    load_estate(estate_url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    seed_log_line(estate_url, SECRET_LINE, service=SERVICE, ts=datetime(2026, 11, 29, 10, 41, 7, tzinfo=UTC),
                  host="payment-7f9c")
    upgrade(audit_url)
    engine = make_engine(audit_url)
    sessions = make_session_factory(engine)
    runs, store = RunStore(sessions), InvocationStore(sessions)
    run_id = runs.create_run(runs.create_session("redaction"), "why does payment fail?", "MULTI_AGENT")
    yield run_id, store, estate_url, tmp_path / "attest.db"
    engine.dispose()


def _citation(invocation_id: int, raw_path: str, excerpt: str) -> dict:
    return {
        "answer_version": "executor_evidence_v2",
        "claims": [{"claim_id": "c1", "claim_type": "symptom", "claim_text": "payment-service 连接 orders-db 被拒绝",
                    "support_level": "direct",
                    "evidence_bindings": [{"source_type": "logs", "tool_name": "query_logs",
                                           "source_invocation_id": invocation_id, "raw_path": raw_path,
                                           "evidence_excerpt": excerpt}]}],
        "hypotheses": [], "recommended_actions": [], "missing_info": [],
    }


def test_a_password_in_a_log_line_is_never_stored_and_the_redacted_line_is_citable(audit) -> None:
    run_id, store, estate_url, database_file = audit
    runner = ToolRunner(store, build_default_registry(build_sql_backends(estate_url)), run_id, 0)
    call = runner("query_logs", {"service": SERVICE, "start": START, "end": END, "contains": "orders-db"})

    assert call.evidence_status == "EVIDENCE_FOUND"
    assert PASSWORD not in call.agent_result  # what the agent, and a model, reads
    assert REDACTED_LINE in call.agent_result
    (stored,) = store.list_for_run(run_id)
    assert PASSWORD not in stored.model_dump_json()
    assert PASSWORD.encode() not in b"".join(path.read_bytes() for path in database_file.parent.glob("attest.db*"))

    (ref,) = [ref for ref in evidence_view(stored).refs() if ref.raw_path.startswith("hits[")]
    assert ref.text.endswith(REDACTED_LINE) and ref.text.startswith("2026-11-29T10:41:07Z ERROR payment-service")
    cited = check_executor_output(run_id, _citation(stored.invocation_id, ref.raw_path,
                                                    "postgres://orders:[REDACTED]@orders-db:5432/orders refused"),
                                  store.list_for_run(run_id))
    assert (cited.parse_status, cited.route, cited.verdict_ceiling) == ("valid", "VERIFIER", "PASS")
    quoted = check_executor_output(run_id, _citation(stored.invocation_id, ref.raw_path,
                                                     f"postgres://orders:{PASSWORD}@orders-db:5432/orders refused"),
                                   store.list_for_run(run_id))
    assert quoted.verdict_ceiling == "REJECT"
    assert "evidence.excerpt_mismatch" in quoted.gatekeeper_result.failed_rules


def test_arguments_carrying_credentials_are_stored_redacted(audit) -> None:
    run_id, store, estate_url, _ = audit
    runner = ToolRunner(store, build_default_registry(build_sql_backends(estate_url)), run_id, 0)
    runner("query_logs", {"service": SERVICE, "start": START, "end": END,
                          "contains": "Authorization: Bearer abcDEF0123456789xyz"})
    runner("lookup_knowledge", "not json: password=hunter2")  # a model's unparsable arguments
    first, second = store.list_for_run(run_id)
    assert first.request["contains"] == "Authorization: Bearer [REDACTED]"
    assert "Bearer [REDACTED]" in first.agent_result and "abcDEF0123456789xyz" not in first.agent_result
    assert second.lifecycle == "ERROR" and second.request["raw_arguments"] == "not json: password=[REDACTED]"


class _FailingLogs:
    source_name = "loki"

    def query_range(self, *args: object, **kwargs: object):
        raise BackendError(f"GET https://ops:{PASSWORD}@loki.internal/loki/api/v1/query_range: HTTP 502")


def test_an_error_message_carrying_a_credential_is_stored_redacted(audit) -> None:
    run_id, store, estate_url, _ = audit
    backends = build_sql_backends(estate_url)
    registry = build_default_registry(ToolBackends(metrics=backends.metrics, logs=_FailingLogs()))  # type: ignore[arg-type]
    call = ToolRunner(store, registry, run_id, 0)("query_logs", {"service": SERVICE, "start": START, "end": END})
    assert call.lifecycle == "ERROR"
    assert PASSWORD not in call.error and "https://ops:[REDACTED]@loki.internal" in call.error
    (stored,) = store.list_for_run(run_id)
    assert stored.error == call.error


def test_the_executor_settings_choose_the_redactor(audit, monkeypatch) -> None:
    _, _, estate_url, _ = audit
    monkeypatch.setenv("ATTEST_REDACTION_PATTERNS", '["corp-[0-9a-f]{8}", "pin=(\\\\d+)"]')
    monkeypatch.setenv("ATTEST_REDACTION_BUILTINS", "false")
    redactor = build_backends(ExecutorSettings(estate_database_url=estate_url)).redactor
    assert redactor.redact("corp-0a1b2c3d pin=1234 password=hunter2") == "[REDACTED] pin=[REDACTED] password=hunter2"
    monkeypatch.delenv("ATTEST_REDACTION_PATTERNS")
    monkeypatch.delenv("ATTEST_REDACTION_BUILTINS")
    default = build_backends(ExecutorSettings(estate_database_url=estate_url)).redactor
    assert default.redact("corp-0a1b2c3d password=hunter2") == "corp-0a1b2c3d password=[REDACTED]"
