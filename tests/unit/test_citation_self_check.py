"""The executor's citation self-check on a model's output: a good binding is
kept as is, a repairable one gets a verbatim excerpt of its own ref, a hopeless one is dropped with
its claim; the result passes the real gatekeeper. And the multi-line rule of log refs."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from services.executor.citation_self_check import check_output, check_output_text
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.excerpt_choice import telling_excerpt
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.tools.log_entry import compact_entry
from services.executor.tools.logs_tool import hit_text
from services.gatekeeper.engine import check_executor_output
from shared.core.contracts import ExecutorEvidenceV2, Plan, PlannedToolCall, RetrievalDetails, ToolInvocation

RUN = "run-self-check"
TRACEBACK = "\n".join(
    ["flush of segment 7 failed", "Traceback (most recent call last):"]
    + [f'  File "/srv/app/writer{k}.py", line {10 + k}, in write\n    self._flush(buffer)' for k in range(20)]
    + ["OSError: [Errno 28] No space left on device"]
)
LOG_REF = hit_text("2026-11-29T10:41:00Z", "ERROR", "ingest-worker", "iw-2", TRACEBACK)
POINT_REF = "ingest-worker disk_used_ratio=97.5% at 2026-11-29T10:40:00Z"


def _invocation(invocation_id: int, tool_name: str, refs: dict[str, str], run_id: str = RUN,
                lifecycle: str = "READY", status: str = "EVIDENCE_FOUND") -> ToolInvocation:
    return ToolInvocation(
        invocation_id=invocation_id, run_id=run_id, tool_name=tool_name, lifecycle=lifecycle, evidence_status=status,
        retrieval_details=RetrievalDetails(evidence_refs=[{"raw_path": p, "text": t} for p, t in refs.items()]),
    )


INVOCATIONS = [
    _invocation(1, "query_metrics", {"series[0].points[3]": POINT_REF}),
    _invocation(2, "query_logs", {"hits[0]": LOG_REF, "summary": "query_logs service=ingest-worker …: 1 matching lines"}),
    _invocation(4, "query_logs", {"hits[0]": LOG_REF}, lifecycle="ERROR", status="ERROR"),
    _invocation(5, "query_logs", {}),
    _invocation(9, "query_logs", {"hits[0]": LOG_REF}, run_id="another-run"),
]


def _binding(invocation_id: int, tool_name: str, raw_path: str, excerpt: str) -> dict:
    return {"source_type": "logs" if tool_name == "query_logs" else "metrics", "tool_name": tool_name,
            "source_invocation_id": invocation_id, "source_invocation_ids": [invocation_id],
            "raw_path": raw_path, "evidence_excerpt": excerpt}


def _claim(claim_id: str, *bindings: dict) -> dict:
    return {"claim_id": claim_id, "claim_type": "observation", "claim_text": f"{claim_id} 的陈述。",
            "support_level": "direct", "evidence_bindings": list(bindings)}


def _output(*claims: dict) -> str:
    return json.dumps({"answer_version": "executor_evidence_v2", "claims": list(claims), "hypotheses": [],
                       "recommended_actions": [], "missing_info": [], "confidence": 0.9}, ensure_ascii=False)


def test_good_kept_repairable_repaired_hopeless_dropped_and_the_gatekeeper_passes_the_rest():
    good = _binding(1, "query_metrics", "series[0].points[3]", "disk_used_ratio=97.5%")
    # The excerpt a model wrote from memory: the number changed, and the traceback's frames.
    repairable = _binding(2, "query_logs", "hits[0]", "disk_used_ratio=79.5% No space left")
    hopeless = _binding(2, "query_logs", "hits[1]", "No space left on device")  # no such ref: never backfilled
    text = _output(_claim("c1", good), _claim("c2", repairable), _claim("c3", hopeless))
    before = check_executor_output(RUN, text, INVOCATIONS)
    assert set(before.gatekeeper_result.failed_rules) == {"evidence.excerpt_mismatch", "evidence.raw_path"}

    checked = check_output_text(text, INVOCATIONS, RUN)

    report = checked.report
    assert (report.repaired, report.dropped_bindings, report.dropped_claims) == (1, 1, 1)
    assert report.summary() == "citation self-check: 1 excerpt(s) repaired, 1 binding(s) dropped, 1 claim(s) dropped"
    assert any("raw_path 'hits[1]' is not among invocation 2's evidence refs" in d for d in report.details)
    output = json.loads(checked.text)
    assert [c["claim_id"] for c in output["claims"]] == ["c1", "c2"]
    assert output["claims"][0]["evidence_bindings"] == [good]
    repaired = output["claims"][1]["evidence_bindings"][0]
    # The most telling line of the same ref, verbatim: the traceback's exception line.
    assert repaired == {**repairable, "evidence_excerpt": "OSError: [Errno 28] No space left on device"}
    assert output["claims"][1]["claim_text"] == "c2 的陈述。"  # claims are never rewritten
    assert output["confidence"] == 0.9  # fields outside the contract are left for the gatekeeper to report

    after = check_executor_output(RUN, checked.text, INVOCATIONS)
    assert after.gatekeeper_result.failed_rules == []
    assert [b.outcome for b in after.gatekeeper_result.checked_bindings] == ["passed", "passed"]


@pytest.mark.parametrize("binding, why", [
    (_binding(2, "query_metrics", "hits[0]", "No space left"), "tool_name 'query_metrics' is not invocation 2's"),
    (_binding(2, "query_logs", "hits[7]", "No space left"), "raw_path 'hits[7]' is not among"),
    (_binding(4, "query_logs", "hits[0]", "No space left"), "invocation 4 is not a ready result (ERROR/ERROR)"),
])
def test_bindings_that_cannot_stand_are_dropped(binding, why):
    checked = check_output_text(_output(_claim("c1", binding), _claim("c2", _binding(1, "query_metrics", "series[0].points[3]", "97.5%"))),
                                INVOCATIONS, RUN)
    assert checked.report.dropped_bindings == 1 and checked.report.dropped_claims == 1
    assert why in checked.report.details[0]
    assert [c["claim_id"] for c in json.loads(checked.text)["claims"]] == ["c2"]


@pytest.mark.parametrize("binding", [
    _binding(9, "query_logs", "hits[0]", "No space left on device"),  # another run's invocation
    _binding(3, "query_logs", "hits[0]", "No space left on device"),  # no such invocation
    {**_binding(1, "query_metrics", "series[0].points[3]", "97.5%"), "source_invocation_ids": [1, 9]},
])
def test_an_invocation_outside_this_run_is_left_to_the_gatekeeper_and_counted(binding):
    """No honest executor cites one: the gatekeeper rejects it with its forensics, so the run's
    audit says so; the self-check neither reads it nor hides it."""
    text = _output(_claim("c1", binding), _claim("c2", _binding(1, "query_metrics", "series[0].points[3]", "97.5%")))
    checked = check_output_text(text, INVOCATIONS, RUN)
    assert checked.text is text and not checked.report.changed and checked.report.outside_run == 1
    assert checked.report.summary() == (
        "citation self-check: 1 binding(s) citing an invocation outside this run left to the gatekeeper")
    result = check_executor_output(RUN, checked.text, INVOCATIONS).gatekeeper_result
    assert result.failed_rules == ["evidence.invocation_ref"] and result.severity == "reject"


def test_a_binding_the_gatekeeper_would_backfill_is_judged_against_that_invocation():
    no_id = {k: v for k, v in _binding(1, "query_metrics", "series[0].points[3]", "disk_used_ratio=79.5%").items()
             if k not in ("source_invocation_id", "source_invocation_ids")}
    checked = check_output_text(_output(_claim("c1", no_id)), INVOCATIONS, RUN)
    assert checked.report.repaired == 1
    [binding] = json.loads(checked.text)["claims"][0]["evidence_bindings"]
    assert binding == {**no_id, "evidence_excerpt": POINT_REF}  # the id is still the gatekeeper's to backfill
    result = check_executor_output(RUN, checked.text, INVOCATIONS).gatekeeper_result
    # No invocation id, one candidate: the gatekeeper backfills it with a warning and verifies it.
    assert result.failed_rules == [] and [b.outcome for b in result.checked_bindings] == ["backfilled"]


def test_a_claim_keeps_its_other_bindings_and_a_blank_excerpt_is_repaired():
    good = _binding(1, "query_metrics", "series[0].points[3]", "97.5%")
    text = _output(_claim("c1", good, _binding(2, "query_logs", "hits[7]", "x"), _binding(2, "query_logs", "hits[0]", "  ")))
    checked = check_output_text(text, INVOCATIONS, RUN)
    assert (checked.report.repaired, checked.report.dropped_bindings, checked.report.dropped_claims) == (1, 1, 0)
    bindings = json.loads(checked.text)["claims"][0]["evidence_bindings"]
    assert [b["raw_path"] for b in bindings] == ["series[0].points[3]", "hits[0]"]
    assert check_executor_output(RUN, checked.text, INVOCATIONS).gatekeeper_result.failed_rules == []


@pytest.mark.parametrize("text", [
    '{"answer_version": "executor_evidence_v2", "claims": [',  # invalid JSON
    "payment-service 一切正常。",  # prose
    json.dumps({"answer_version": "executor_evidence_v1", "claims": []}),  # not the contract
])
def test_output_that_is_not_the_contract_is_left_untouched(text):
    checked = check_output_text(text, INVOCATIONS, RUN)
    assert checked.text is text and not checked.report.changed


def test_nothing_to_repair_leaves_the_text_as_written():
    text = "```json\n" + _output(_claim("c1", _binding(1, "query_metrics", "series[0].points[3]", "97.5%"))) + "\n```"
    checked = check_output_text(text, INVOCATIONS, RUN)
    assert checked.text is text and checked.report.summary() == ""


def test_what_the_gatekeeper_marks_low_confidence_or_decides_by_its_schema_is_left_to_it():
    """No raw_path (never backfilled), an invocation without refs, no id at all (the narrow
    backfill), an excerpt too short: low confidence by the gatekeeper's rules, which the verdict
    ceiling must carry. Ids that are not integers, a binding that is not an object: schema
    questions. None of them is guessed at here."""
    # query_logs has three invocations in this run: the backfill has no single candidate.
    no_id = {k: v for k, v in _binding(2, "query_logs", "hits[0]", "wrong").items()
             if k not in ("source_invocation_id", "source_invocation_ids")}
    text_id = {**no_id, "source_invocation_id": "2"}
    no_path = {k: v for k, v in _binding(2, "query_logs", "", "No space left").items() if k != "raw_path"}
    text = _output(_claim("c1", no_id), _claim("c2", text_id), _claim("c3", "not a binding"),
                   _claim("c4", no_path), _claim("c5", _binding(2, "query_logs", "  ", "No space left")),
                   _claim("c6", _binding(5, "query_logs", "hits[0]", "No space left")),
                   _claim("c7", _binding(1, "query_metrics", "series[0].points[3]", "%")))
    checked = check_output_text(text, INVOCATIONS, RUN)
    assert checked.text is text and not checked.report.changed
    result = check_executor_output(RUN, text, INVOCATIONS).gatekeeper_result
    assert result.severity == "low_confid"
    assert set(result.failed_rules) == {"schema.executor_v2", "evidence.invocation_ref", "evidence.raw_path",
                                        "evidence.excerpt_too_short"}


def test_the_typed_path_applies_the_same_rules():
    output = ExecutorEvidenceV2.model_validate_json(_output(
        _claim("c1", _binding(2, "query_logs", "hits[0]", "No space left on disk")),
        _claim("c2", _binding(2, "query_logs", "hits[3]", "No space left on device")),
    ))
    checked, report = check_output(output, INVOCATIONS)
    assert (report.repaired, report.dropped_bindings, report.dropped_claims) == (1, 1, 1)
    assert [c.claim_id for c in checked.claims] == ["c1"]
    assert checked.claims[0].evidence_bindings[0].evidence_excerpt == "OSError: [Errno 28] No space left on device"


# --- multi-line log entries -----------------------------------------------------------------------

JAVA = "\n".join(
    ["order 7 rejected by the payment gateway", "com.acme.pay.GatewayException: upstream refused the charge"]
    + ["\tat com.acme.pay.Client.charge(Client.java:88)"] * 30
    + ["Caused by: java.net.SocketTimeoutException: Read timed out after 3000ms"]
    + ["\tat java.net.SocketInputStream.read(SocketInputStream.java:171)"] * 10 + ["\t... 31 more"]
)


def test_a_python_traceback_keeps_its_first_and_its_exception_line():
    assert len(TRACEBACK) > 500
    assert LOG_REF == (
        "2026-11-29T10:41:00Z ERROR ingest-worker host=iw-2 flush of segment 7 failed\n"
        "…\nOSError: [Errno 28] No space left on device"
    )
    assert telling_excerpt(LOG_REF, LOG_REF.index("flush")) == "OSError: [Errno 28] No space left on device"


def test_a_java_trace_keeps_its_first_line_its_exception_and_its_caused_by_lines():
    kept = compact_entry(JAVA, 300)
    assert kept == (
        "order 7 rejected by the payment gateway\n"
        "com.acme.pay.GatewayException: upstream refused the charge\n…\n"
        "Caused by: java.net.SocketTimeoutException: Read timed out after 3000ms\n…"
    )
    assert telling_excerpt(kept) == "Caused by: java.net.SocketTimeoutException: Read timed out after 3000ms"


def test_a_tight_cap_keeps_the_root_cause_before_the_top_exception():
    kept = compact_entry(JAVA, 130)
    assert len(kept) <= 130
    assert kept.startswith("order 7 rejected") and "Caused by: java.net.SocketTimeoutException" in kept
    assert "GatewayException" not in kept


def test_a_long_single_line_keeps_its_head_and_its_late_exception():
    line = '{"ts":"2026-11-29T10:41:00Z","ctx":"' + "载荷\t" * 150 + '","msg":"IllegalStateException: pool exhausted"}'
    kept = compact_entry(line, 200)
    assert len(kept) <= 200
    assert kept.startswith('{"ts":"2026-11-29T10:41:00Z"') and 'IllegalStateException: pool exhausted"}' in kept
    assert telling_excerpt(kept) == "IllegalStateException: pool exhausted"


def test_text_without_an_exception_line_is_cut_from_its_start_as_before():
    lines = "\n".join(f"step {k} ok" for k in range(100))
    assert compact_entry(lines, 50) == lines[:49] + "…"
    assert compact_entry("short", 50) == "short"


@pytest.mark.parametrize("limit", [1, 2, 10, 39, 40, 79, 80, 81, 120, 200, 400])
def test_the_cap_is_never_exceeded(limit):
    for message in (JAVA, TRACEBACK, "x" * 1000, "前" * 1000 + " ValueError: 参数错误"):
        assert len(compact_entry(message, limit)) <= limit


def test_an_excerpt_never_stops_inside_a_number():
    text = "2026-11-29T10:41:00Z ERROR api host=a-1 " + "latency " * 15 + "p99=12345.678ms over budget"
    excerpt = telling_excerpt(text, text.index("latency"), max_chars=len("latency ") * 15 + len("p99=12345.6"))
    assert excerpt is not None and not excerpt.endswith(("12345.6", "12345.", "1234"))
    assert check_executor_output(RUN, _output(_claim("c1", _binding(5, "query_logs", "hits[0]", excerpt))),
                                 [_invocation(5, "query_logs", {"hits[0]": text})]).gatekeeper_result.failed_rules == []


# --- the embedded single-ReAct agent -----------------------------------------------------------------


def test_the_embedded_single_react_draft_states_no_finding_whose_citation_cannot_stand():
    """The Draft's Analyses cite tool_call_ids, not excerpts; but a finding whose every binding
    would be refused is not stated at all, and a repairable one is kept."""
    class OneCallPlanner:
        def plan(self, query, now, services=None, intent=None):
            return Plan(services=["ingest-worker"], steps=[PlannedToolCall(tool_name="query_logs", arguments={})])

    class ScriptedFindings(EmbeddedExecutorAgent):
        def derive(self, plan, invocations, query):
            [invocation] = invocations
            return ExecutorEvidenceV2.model_validate_json(_output(
                _claim("c1", _binding(invocation.invocation_id, "query_logs", "hits[0]", "No space left on disk")),
                _claim("c2", _binding(invocation.invocation_id, "query_logs", "hits[5]", "No space left on device")),
            ))

    def call_tool(tool_name, arguments, tool_call_id):
        return INVOCATIONS[1].model_copy(update={"tool_call_id": tool_call_id})

    agent = EmbeddedReactAgent(planner=OneCallPlanner(), findings=ScriptedFindings(),
                               clock=lambda: datetime(2026, 11, 29, 11, 0, tzinfo=UTC))
    run = agent.run("ingest-worker 为什么写入失败？", call_tool, max_steps=5)
    assert run.draft is not None
    assert [a.text for a in run.draft.analyses] == ["c1 的陈述。"]


def test_a_repaired_log_excerpt_quotes_the_message_not_the_line_prefix():
    """Where a log line's message starts is read from the stored result (the renderer's prefix),
    never by searching the text: a line without an exception line is quoted from its message."""
    from shared.core.tool_results import LogHit, LogsResult, dump_result, rendered_refs

    result = LogsResult(
        tool="query_logs", service="ingest-worker", start="2026-11-29T10:00:00Z", end="2026-11-29T11:00:00Z",
        total_matches=1, hits=[LogHit(ts="2026-11-29T10:41:00Z", level="ERROR", host="iw-2",
                                      message="upstream payments-api timed out after 3000ms while flushing segment 7")],
        summary="query_logs service=ingest-worker: 1 matching lines",
    )
    invocation = ToolInvocation(
        invocation_id=2, run_id=RUN, tool_name="query_logs", lifecycle="READY", evidence_status="EVIDENCE_FOUND",
        agent_result=dump_result(result),
        retrieval_details=RetrievalDetails(evidence_refs=[{"raw_path": r.raw_path, "text": r.text} for r in rendered_refs(result)]),
    )
    text = _output(_claim("c1", _binding(2, "query_logs", "hits[0]", "payments-api timed out after 5000ms")))
    checked = check_output_text(text, [invocation], RUN)
    [binding] = json.loads(checked.text)["claims"][0]["evidence_bindings"]
    assert checked.report.repaired == 1
    assert binding["evidence_excerpt"].startswith("upstream payments-api timed out")
