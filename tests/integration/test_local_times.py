"""Times people read, through six real processes: the answer the user gets, in
both modes, unary and streamed, shows its times in the configured zone and names the zone at its
end; the audit's claims, tool results and composer output keep UTC, and the run's stored answer is
the one the user saw."""

from __future__ import annotations

import re
from datetime import datetime

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.config import configured_time_zone
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.local_time import LocalTimeDisplay
from shared.proto_convert import enum_number
from tests.integration.test_end_to_end import _incident_service

pytestmark = pytest.mark.integration
UTC_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?Z")
LOCAL_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
QUOTE = re.compile(r"「[^「」\n]*」")
MODES = {"MULTI_AGENT": enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "MULTI_AGENT"),
         "SINGLE_REACT": enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "SINGLE_REACT")}


def _ask(cluster, auth_metadata, mode: str, streamed: bool) -> gateway_pb2.DiagnoseResponse:
    query = f"{_incident_service()} 最近一小时有什么异常？"
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        if not streamed:
            return stub.Diagnose(gateway_pb2.DiagnoseRequest(query=query, mode=MODES[mode]), timeout=90,
                                 metadata=auth_metadata)
        results = [item.result for item in stub.DiagnoseStream(
            gateway_pb2.DiagnoseStreamRequest(query=query, mode=MODES[mode]), timeout=90, metadata=auth_metadata)
            if item.HasField("result")]
        assert len(results) == 1
        return results[0]


@pytest.mark.parametrize("mode, streamed", [("MULTI_AGENT", False), ("SINGLE_REACT", True)])
def test_the_answer_shows_local_times_and_the_audit_keeps_utc(cluster, auth_metadata, run_store, mode, streamed):
    display = LocalTimeDisplay(configured_time_zone())
    response = _ask(cluster, auth_metadata, mode, streamed)
    answer = response.answer

    # What the user reads: no UTC timestamp outside quoted tool text, local times, the zone named last.
    outside_quotes = QUOTE.sub("", answer)
    assert not UTC_TIMESTAMP.search(outside_quotes), answer
    assert LOCAL_TIMESTAMP.search(answer), answer
    assert answer.splitlines()[-2] == "【时区】", answer
    assert re.fullmatch(rf"- 时间均为 {re.escape(display.zone_name)} 时间（UTC[+-]\d{{2}}:\d{{2}}）.*",
                        answer.splitlines()[-1]), answer

    # What the audit keeps: the composer's (or the release's) text in UTC, the same answer localized.
    run = run_store.get_run(response.run_id)
    assert run["answer"] == answer, "the stored answer is the one the user saw"
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    composed = evaluation["composer_output"]["answer"]
    first_utc = UTC_TIMESTAMP.search(QUOTE.sub("", composed))
    assert first_utc, composed
    shown = display.format(datetime.fromisoformat(first_utc.group(0).replace("Z", "+00:00")))
    assert shown in answer  # the same instant, in the zone
    assert display.localize_answer(composed) == answer  # nothing but the display step between them

    if mode == "MULTI_AGENT":  # the verified claims the verifier judged keep UTC
        claims = evaluation["verified_executor_output"]["claims"]
        assert any(UTC_TIMESTAMP.search(claim["claim_text"]) for claim in claims), claims

    # Tool requests stay UTC.
    store = InvocationStore(make_session_factory(make_engine(cluster.database_url)))
    requests = [inv.request for inv in store.list_for_run(response.run_id) if inv.tool_name == "query_metrics"]
    assert requests and all(str(r["start"]).endswith("Z") and str(r["end"]).endswith("Z") for r in requests)
