"""NaN and Infinity in the store's JSON columns: stored as the strings "NaN",
"Infinity" and "-Infinity" on SQLite and on PostgreSQL alike, with a WARNING naming where.

PostgreSQL used to refuse such a write and SQLite to store bare NaN tokens that are not JSON."""

from __future__ import annotations

import json
import logging
import math

import pytest
from pydantic import BaseModel
from sqlalchemy import text

from shared.core.contracts import EvidenceRef
from shared.db.stored_json import dumps_stored_json
from tests.unit.test_db_stores import (  # noqa: F401 - pytest fixtures, used by name
    engine,
    invocations,
    postgresql_engine,
    run_id,
    runs,
    sqlite_engine,
)

NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "minus_inf": float("-inf")}
SPELLED = {"nan": "NaN", "inf": "Infinity", "minus_inf": "-Infinity"}


def _json_type(engine, column_sql: str, table: str, where: str) -> str:  # noqa: F811 - engine is a parameter
    """The database's own type of one stored JSON value: the database parsed the text itself."""
    function = "jsonb_typeof" if engine.dialect.name == "postgresql" else "json_type"
    with engine.connect() as connection:
        return connection.execute(text(f"SELECT {function}({column_sql}) FROM {table} WHERE {where}")).scalar_one()


def test_a_channel_with_non_finite_numbers_is_stored_as_strings(runs, run_id, engine, caplog):  # noqa: F811
    document = {"finite": 0.5, "score": {**NON_FINITE}, "series": [1.0, float("nan")]}
    with caplog.at_level(logging.WARNING, logger="shared.db.stored_json"):
        runs.write_channel(run_id, "rule_evaluation", document)

    stored = runs.get_run(run_id)["self_evaluation"]["rule_evaluation"]
    assert stored == {"finite": 0.5, "score": SPELLED, "series": [1.0, "NaN"]}
    nan_path = ("self_evaluation->'rule_evaluation'->'score'->'nan'" if engine.dialect.name == "postgresql"
                else "self_evaluation, '$.rule_evaluation.score.nan'")
    assert _json_type(engine, nan_path, "diagnosis_run", f"run_id = '{run_id}'") in ("string", "text")
    (record,) = [r for r in caplog.records if r.name == "shared.db.stored_json"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "4 non-finite" in message
    for path in ("$.rule_evaluation.score.nan", "$.rule_evaluation.score.minus_inf", "$.rule_evaluation.series[1]"):
        assert path in message


def test_a_tool_request_with_nan_is_recorded_and_its_invocation_completes(invocations, run_id, engine):  # noqa: F811
    # What a model's tool call `{"service": "payment-service", "threshold": NaN}` becomes.
    invocation_id = invocations.begin(run_id, "call-1", "query_metrics", 0,
                                      {"tool": "query_metrics", "service": "payment-service", "threshold": math.nan})
    done = invocations.complete(invocation_id, evidence_status="EVIDENCE_FOUND", agent_result="cpu 92%",
                                evidence_refs=[EvidenceRef(raw_path="series[0]", text="cpu 92%")])

    expected = {"tool": "query_metrics", "service": "payment-service", "threshold": "NaN"}
    assert done.request == expected
    assert invocations.list_for_run(run_id)[0].request == expected
    (account,) = invocations.accounts_for_run(run_id)  # the database's JSON functions read the row
    assert (account.lifecycle, account.evidence_refs) == ("READY", 1)
    threshold = ("request->'threshold'" if engine.dialect.name == "postgresql" else "request, '$.threshold'")
    assert _json_type(engine, threshold, "tool_invocation", f"invocation_id = {invocation_id}") in ("string", "text")


def test_an_event_payload_keeps_minus_infinity_apart_from_infinity(runs, run_id):  # noqa: F811
    runs.record_events(run_id, [
        {"node": "verify", "phase": "EXIT", "payload": {"ratio": float("-inf")}},
        {"node": "verify", "phase": "INFO", "payload": {"ratio": float("inf"), "keys": {float("nan"): 1}}},
    ])
    payloads = [event["payload"] for event in runs.get_run(run_id)["events"]]
    assert payloads == [{"ratio": "-Infinity"}, {"ratio": "Infinity", "keys": {"NaN": 1}}]


def test_a_float_field_reads_the_spelling_back_as_the_number():
    class Reading(BaseModel):
        value: float

    stored = json.loads(dumps_stored_json({"value": float("-inf")}))
    assert Reading.model_validate(stored).value == float("-inf")
    assert math.isnan(Reading.model_validate(json.loads(dumps_stored_json({"value": math.nan}))).value)


def test_a_finite_document_is_written_as_json_dumps_writes_it(caplog):
    document = {"中文": "结论", "n": [1, 2.5, -0.0, 10**30], "ok": True, "none": None}
    with caplog.at_level(logging.WARNING, logger="shared.db.stored_json"):
        assert dumps_stored_json(document) == json.dumps(document)
    assert caplog.records == []


def test_a_circular_document_is_still_refused():
    document: dict = {"nan": math.nan}
    document["self"] = document
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_stored_json(document)
