"""Following a dependency: which services an error signature names, and the
bounded follow-up calls. The catalogue and every service name here are made up for these tests."""

from __future__ import annotations

import json

import pytest

from services.executor.dependency_follow import (
    MAX_FOLLOWED,
    find_dependencies,
    follow_dependencies,
    named_hosts,
    plan_follow_up,
)
from services.executor.service_catalogue import Catalogue, resolve_services
from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation

CATALOGUE = Catalogue(names=frozenset({"fare-gate", "quota-keeper", "Rate.Limiter", "seat-ledger", "promo-engine"}))
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
CALLS = [
    ("query_metrics", {"service": "fare-gate", "start": START, "end": END, "step_seconds": 60}),
    ("query_logs", {"service": "fare-gate", "start": START, "end": END, "level": ["ERROR", "WARN"], "limit": 200,
                    "contains": "timeout"}),
    ("query_changes", {"service": "fare-gate", "start": START, "end": END, "limit": 50}),
]


@pytest.mark.parametrize(("message", "expected"), [
    # logfmt
    ('level=error msg="request failed" upstream=quota-keeper status=504', ["quota-keeper"]),
    ("10.1.2.3 - - \"POST /v1/fares HTTP/1.1\" 502 157 rt=30.004 upstream=quota-keeper:8443 upstream_status=504",
     ["quota-keeper"]),
    # JSON
    ('{"level":"error","service":"fare-gate","upstream":"quota-keeper","msg":"deadline exceeded"}',
     ["fare-gate", "quota-keeper"]),
    ('{"peer.service": "seat-ledger", "error": "unavailable"}', ["seat-ledger"]),
    # nginx error log: the upstream URL (its first DNS label too), the virtual server, the Host header
    (('[error] 31#31: *601871 upstream timed out (110: Connection timed out) while reading response header from '
      'upstream, client: 10.7.1.2, server: edge, request: "POST /v1/fares HTTP/1.1", '
      'upstream: "http://quota-keeper.fares.svc.cluster.local:8080/v1/quota", host: "api.example.test"'),
     ["edge", "quota-keeper", "quota-keeper.fares.svc.cluster.local", "api.example.test"]),
    # Chinese
    ("调用 quota-keeper 超时（3000ms）", ["quota-keeper"]),
    ("调用quota-keeper失败 traceId=ab12", ["quota-keeper"]),
    ("下游「seat-ledger」响应超时", ["seat-ledger"]),
    ("seat-ledger 服务不可用", ["seat-ledger"]),
    # Java exception: InetSocketAddress is host/ip:port
    ("Caused by: java.net.ConnectException: Connection refused: seat-ledger/10.0.0.1:5432", ["seat-ledger"]),
    # verbs and addresses
    ("calling promo-engine failed after 3 attempts", ["promo-engine"]),
    ("failed to connect to seat-ledger: connection reset", ["seat-ledger"]),
    ("dial tcp promo-engine:9000: i/o timeout", ["promo-engine"]),
    ("GET https://user:pw@promo-engine/v2/offers returned 503", ["promo-engine"]),
    ("lookup promo-engine.default.svc on 10.96.0.10:53: no such host", ["promo-engine"]),
    # nothing that points anywhere: an address, a version, a time, a key that is not a destination
    ("retry after 12:30 with client v1.2.3 from 10.0.0.7:443", []),
    ('level=error pool=seat-primary err="QueuePool limit reached"', []),
])
def test_named_hosts_reads_the_generic_shapes(message, expected):
    assert named_hosts(message) == expected


def _logs(invocation_id: int, service: str, hits: list[tuple[str, str, str]], *, lifecycle: str = "READY") -> ToolInvocation:
    """A query_logs invocation of `service` with hits (level, host, message)."""
    records = [{"ts": f"2026-11-29T10:{10 + k:02d}:00Z", "level": level, "host": host, "message": message}
               for k, (level, host, message) in enumerate(hits)]
    refs = [EvidenceRef(raw_path=f"hits[{k}]", text=f"{r['ts']} {r['level']} {service} host={r['host']} {r['message']}")
            for k, r in enumerate(records)]
    return ToolInvocation(
        invocation_id=invocation_id, run_id="run-1", tool_name="query_logs", lifecycle=lifecycle,
        evidence_status="EVIDENCE_FOUND" if records else "NO_EVIDENCE",
        request={"tool": "query_logs", "service": service, "start": START, "end": END},
        agent_result=json.dumps({"tool": "query_logs", "service": service, "total_matches": len(records), "hits": records}),
        retrieval_details=RetrievalDetails(evidence_refs=refs),
    )


def _metrics(invocation_id: int, service: str) -> ToolInvocation:
    return ToolInvocation(invocation_id=invocation_id, run_id="run-1", tool_name="query_metrics", lifecycle="READY",
                          evidence_status="EVIDENCE_FOUND", request={"tool": "query_metrics", "service": service},
                          agent_result="{}")


def _resolution(named=("fare-gate",), limit=10, catalogue=CATALOGUE):
    return resolve_services(list(named), catalogue, limit)


def test_a_catalogued_upstream_is_followed_with_the_callers_calls_over_its_window():
    invocations = [_metrics(1, "fare-gate"), _logs(2, "fare-gate", [
        ("ERROR", "fare-gate-0", "upstream=quota-keeper:8443 upstream_status=504"),
        ("ERROR", "fare-gate-1", "upstream=quota-keeper:8443 upstream_status=504"),
    ])]
    plan = plan_follow_up(CALLS, invocations, _resolution())
    assert [d.service for d in plan.followed] == ["quota-keeper"]
    assert (plan.followed[0].caller, plan.followed[0].invocation_id, plan.followed[0].raw_path) == ("fare-gate", 2, "hits[0]")
    assert plan.calls == [
        ("query_metrics", {"service": "quota-keeper", "start": START, "end": END, "step_seconds": 60}),
        ("query_logs", {"service": "quota-keeper", "start": START, "end": END, "level": ["ERROR", "WARN"], "limit": 200}),
    ], "the caller's calls with the service replaced; its substring filter is not carried over"
    assert plan.left_out == [] and plan.missing_info == []


def test_a_name_the_catalogue_does_not_know_is_not_followed_and_nothing_is_said_about_it():
    invocations = [_logs(2, "fare-gate", [("ERROR", "fare-gate-0", "upstream=ghost-cache:6379 connection refused")])]
    plan = plan_follow_up(CALLS, invocations, _resolution())
    assert plan.calls == [] and plan.followed == [] and plan.missing_info == []


def test_the_service_itself_its_instances_and_services_already_checked_are_not_followed():
    catalogue = Catalogue(names=CATALOGUE.names | {"fare-gate-0"})  # an instance that is also a catalogue name
    invocations = [
        _logs(2, "fare-gate", [
            ("ERROR", "fare-gate-0", '{"service":"fare-gate","host":"fare-gate-0","msg":"调用 fare-gate 超时"}'),
            ("ERROR", "fare-gate-1", "upstream=seat-ledger:9000 status=503"),
        ]),
        _logs(4, "seat-ledger", []),
    ]
    resolution = _resolution(("fare-gate", "seat-ledger"), catalogue=catalogue)
    assert find_dependencies(invocations, resolution) == []


def test_a_name_the_question_named_but_left_unchecked_is_not_followed():
    invocations = [_logs(2, "fare-gate", [("ERROR", "fare-gate-0", "upstream=seat-ledger:9000 status=503")])]
    resolution = _resolution(("fare-gate", "seat-ledger"), limit=1)
    assert resolution.coverage.unchecked == ["seat-ledger"]
    assert plan_follow_up(CALLS, invocations, resolution).calls == []


def test_nothing_is_followed_when_the_catalogue_could_not_be_read_or_no_resolution_is_known():
    invocations = [_logs(2, "fare-gate", [("ERROR", "fare-gate-0", "upstream=quota-keeper:8443")])]
    unavailable = _resolution(catalogue=Catalogue(available=False, error="down"))
    assert plan_follow_up(CALLS, invocations, unavailable).calls == []
    assert follow_dependencies(CALLS, invocations, lambda *a, **k: None).calls == [], "a call_tool without a resolution"


def test_the_catalogue_spelling_is_used_and_a_dns_name_resolves_by_its_first_label():
    invocations = [_logs(2, "fare-gate", [
        ("ERROR", "fare-gate-0", 'upstream: "http://rate-limiter.edge.svc.cluster.local:8080/check"'),
    ])]
    assert [d.service for d in find_dependencies(invocations, _resolution())] == ["Rate.Limiter"]


def test_only_warn_or_worse_lines_count_and_warnings_alone_need_a_burst():
    few_warnings = [("WARN", "fare-gate-0", "calling promo-engine took 900ms")] * 2
    info = [("INFO", "fare-gate-0", "upstream=quota-keeper:8443 status=200")] * 9
    assert find_dependencies([_logs(2, "fare-gate", few_warnings + info)], _resolution()) == []
    burst = [("WARN", "fare-gate-0", "calling promo-engine took 900ms")] * 5
    assert [d.service for d in find_dependencies([_logs(2, "fare-gate", burst)], _resolution())] == ["promo-engine"]


def test_a_failed_logs_invocation_is_not_read():
    invocations = [_logs(2, "fare-gate", [("ERROR", "fare-gate-0", "upstream=quota-keeper:8443")], lifecycle="ERROR")]
    assert find_dependencies(invocations, _resolution()) == []


def test_at_most_two_are_followed_the_strongest_first_and_the_rest_are_named_as_not_checked():
    invocations = [_logs(2, "fare-gate", [
        ("WARN", "fare-gate-0", "calling promo-engine slow"),
        ("ERROR", "fare-gate-0", "调用 seat-ledger 失败"),
        ("ERROR", "fare-gate-1", "upstream=quota-keeper:8443"),
        ("ERROR", "fare-gate-1", "upstream=quota-keeper:8443"),
        ("FATAL", "fare-gate-1", "connect to promo-engine: connection refused"),
    ])]
    plan = plan_follow_up(CALLS, invocations, _resolution())
    # weights: quota-keeper 2 errors = 6, promo-engine warn + fatal = 5, seat-ledger one error = 3
    assert [d.service for d in plan.followed] == ["quota-keeper", "promo-engine"] and MAX_FOLLOWED == 2
    assert [d.service for d, _ in plan.left_out] == ["seat-ledger"]
    assert [m.text for m in plan.missing_info] == [
        f"fare-gate 的错误日志提到了 seat-ledger；每次最多追查 {MAX_FOLLOWED} 个依赖服务，本次未检查 seat-ledger。"]
    assert plan_follow_up(CALLS, invocations, _resolution()) == plan, "deterministic"


def test_the_per_question_limit_bounds_checked_plus_followed_services():
    invocations = [_logs(2, "fare-gate", [
        ("ERROR", "fare-gate-0", "upstream=quota-keeper:8443"), ("ERROR", "fare-gate-0", "调用 seat-ledger 失败"),
    ])]
    plan = plan_follow_up(CALLS, invocations, _resolution(limit=2))
    assert [d.service for d in plan.followed] == ["quota-keeper"]
    assert [m.text for m in plan.missing_info] == [
        "fare-gate 的错误日志提到了 seat-ledger；每个问题最多检查 2 个服务，本次未检查 seat-ledger。"]
    assert plan_follow_up(CALLS, invocations, _resolution(limit=1)).calls == []


def test_the_steps_left_bound_the_follow_up():
    invocations = [_logs(2, "fare-gate", [
        ("ERROR", "fare-gate-0", "upstream=quota-keeper:8443"), ("ERROR", "fare-gate-0", "调用 seat-ledger 失败"),
    ])]
    plan = plan_follow_up(CALLS, invocations, _resolution(), max_calls=3)
    assert [d.service for d in plan.followed] == ["quota-keeper"] and len(plan.calls) == 2
    assert [(d.service, bound) for d, bound in plan.left_out] == [("seat-ledger", "剩余步骤不足")]
    assert plan_follow_up(CALLS, invocations, _resolution(), max_calls=1).calls == []


def test_a_caller_without_a_planned_metrics_call_gets_one_over_its_logs_window():
    calls = [("query_logs", {"service": "fare-gate", "start": START, "end": END, "level": "ERROR"})]
    invocations = [_logs(2, "fare-gate", [("ERROR", "fare-gate-0", "upstream=quota-keeper:8443")])]
    assert plan_follow_up(calls, invocations, _resolution()).calls == [
        ("query_metrics", {"service": "quota-keeper", "start": START, "end": END}),
        ("query_logs", {"service": "quota-keeper", "start": START, "end": END, "level": "ERROR"}),
    ]
