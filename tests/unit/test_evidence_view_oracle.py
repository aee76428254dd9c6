"""Evidence rendered on demand gives what the full ref list gave.

The oracle is `rendered_refs(result)`, the list the executor used to store: for any typed result
and any raw_path, `ref_at` finds exactly the ref the list holds at that path (text, timestamp,
document) or nothing when the list has none, and `ref_count` is the list's length. And the
gatekeeper, given the stored call as a view and as that list, decides every binding the same way
(raw-path validity, excerpt support) and passes the same evidence on.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.gatekeeper.engine import check_executor_output
from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation
from shared.core.tool_results import (
    ChangeRecord,
    ChangesResult,
    KnowledgeChunk,
    KnowledgeDoc,
    KnowledgeResult,
    LogHit,
    LogsResult,
    MetricSeriesResult,
    MetricsResult,
    SeriesEnd,
    SeriesOnset,
    SeriesSummary,
    SeriesTop,
    dump_result,
    ref_at,
    ref_count,
    rendered_refs,
)

stamps = st.sampled_from(["2026-12-01T10:00:00Z", "2026-12-01T10:01:00Z", ""])
words = st.text(alphabet="ab 连接池超时=:.%[]0123456789", max_size=30)
long_words = st.one_of(words, st.text(alphabet="xy ", min_size=480, max_size=520))
numbers = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9)


@st.composite
def metric_results(draw) -> MetricsResult:
    series = []
    for i in range(draw(st.integers(0, 3))):
        points = [(draw(stamps), draw(numbers)) for _ in range(draw(st.integers(0, 4)))]
        onset = draw(st.none() | st.builds(SeriesOnset, at=stamps, direction=st.sampled_from(["up", "down"]),
                                           before=numbers, after=numbers))
        series.append(MetricSeriesResult(
            metric=f"m{i}", unit=draw(st.sampled_from(["", "percent", "bytes", "seconds"])), points=points,
            summary=draw(st.none() | st.builds(SeriesSummary, count=st.integers(0, 9), min=numbers, median=numbers,
                                                max=numbers, max_at=stamps)),
            onset=onset,
            end=draw(st.none() | st.builds(SeriesEnd, at=stamps, level=numbers)),
            top=draw(st.none() | st.builds(SeriesTop, label=words, value=words, level=numbers, at=stamps,
                                           instances=st.integers(1, 9))),
        ))
    return MetricsResult(tool="query_metrics", service=draw(words), metric="m", start=draw(stamps), end=draw(stamps),
                         step_seconds=60, series=series, summary=draw(long_words))


@st.composite
def log_results(draw) -> LogsResult:
    hits = [LogHit(ts=draw(stamps), level="ERROR", service=draw(words), host=draw(words), message=draw(long_words))
            for _ in range(draw(st.integers(0, 4)))]
    return LogsResult(tool="query_logs", service=draw(words), start=draw(stamps), end=draw(stamps),
                      total_matches=len(hits), returned=len(hits), hits=hits, summary=draw(words))


@st.composite
def change_results(draw) -> ChangesResult:
    changes = [ChangeRecord(ts=draw(stamps), service=draw(words), kind="deploy", author=draw(words),
                            summary=draw(long_words)) for _ in range(draw(st.integers(0, 4)))]
    return ChangesResult(tool="query_changes", service=draw(words), start=draw(stamps), end=draw(stamps),
                         total_matches=len(changes), returned=len(changes), changes=changes, summary=draw(words))


@st.composite
def knowledge_results(draw) -> KnowledgeResult:
    docs = []
    for i in range(draw(st.integers(0, 3))):
        chunks = []
        for _ in range(draw(st.integers(0, 3))):
            deduped = draw(st.booleans())
            text = None if deduped and draw(st.booleans()) else draw(st.none() | long_words)
            chunks.append(KnowledgeChunk(heading=draw(words), text=text, deduped=deduped))
        docs.append(KnowledgeDoc(path=f"runbooks/doc{i}.md", title=draw(words), chunks=chunks))
    return KnowledgeResult(tool="lookup_knowledge", query=draw(words), top_k=3, docs=docs, summary=draw(words))


results = st.one_of(metric_results(), log_results(), change_results(), knowledge_results())
near_paths = st.sampled_from([
    "summary", " summary", "summary ", "hits[0]", "hits[01]", "hits[1]", "hits[9]", "hits[0].summary", "hits[-1]",
    "changes[0]", "changes[2]", "series[0]", "series[0].points[0]", "series[0].points[00]", "series[1].points[3]",
    "series[0].summary", "series[0].onset", "series[0].end", "series[0].top", "series[2].top", "series[0].points",
    "docs[0].chunks[0]", "docs[1].chunks[2]", "docs[0].chunks[0] ", "docs[0]", "docs[0].summary", "", "series[0].end[0]",
])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(results, st.lists(near_paths, max_size=8))
def test_a_ref_rendered_on_demand_is_the_listed_ref_at_that_path(result, extra_paths) -> None:
    listed = {ref.raw_path: ref for ref in rendered_refs(result)}
    assert len(listed) == len(rendered_refs(result))  # one ref per path
    for path in [*listed, *extra_paths]:
        assert ref_at(result, path) == listed.get(path), path
    assert ref_count(result) == len(listed)


def test_a_spelling_no_stored_ref_has_finds_nothing() -> None:
    result = LogsResult(tool="query_logs", service="pay", hits=[LogHit(ts="t", level="ERROR", host="h", message="boom")],
                        total_matches=1, returned=1, summary="s")
    assert ref_at(result, "hits[0]") is not None
    assert ref_at(result, "hits[00]") is None
    assert ref_at(result, " hits[0]") is None
    assert ref_at(result, "hits[1]") is None


# --- the gatekeeper on a view and on the list it replaces ------------------------------------------

TOOL_OF = {MetricsResult: "query_metrics", LogsResult: "query_logs", ChangesResult: "query_changes",
           KnowledgeResult: "lookup_knowledge"}
SOURCE_TYPE = {"query_metrics": "metrics", "query_logs": "logs", "query_changes": "changes",
               "lookup_knowledge": "knowledge"}


def _invocations(result) -> tuple[ToolInvocation, ToolInvocation]:
    """The same stored call twice: as the executor stores it now (refs rendered from the result)
    and as it stored it before (the full list, each ref's source as the view gives it)."""
    tool = TOOL_OF[type(result)]
    common = {"invocation_id": 7, "run_id": "run-oracle", "tool_call_id": "call-7", "tool_name": tool,
              "lifecycle": "READY", "evidence_status": "EVIDENCE_FOUND", "request": {"tool": tool, "service": "pay"},
              "agent_result": dump_result(result)}
    listed = [EvidenceRef(raw_path=r.raw_path, text=r.text, source=r.document or "estate-sql:bench", timestamp=r.timestamp)
              for r in rendered_refs(result)]
    view = ToolInvocation(**common, retrieval_details=RetrievalDetails(
        source="estate-sql:bench", refs_rendered=True, ref_count=ref_count(result)))
    old = ToolInvocation(**common, retrieval_details=RetrievalDetails(evidence_refs=listed))
    return view, old


@st.composite
def cited_outputs(draw):
    result = draw(results)
    texts = {ref.raw_path: ref.text for ref in rendered_refs(result)}
    bindings = []
    for _ in range(draw(st.integers(1, 6))):
        path = draw(st.sampled_from(sorted(texts)) | near_paths) if texts else draw(near_paths)
        text = texts.get(path) or draw(words)
        start = draw(st.integers(0, max(0, len(text) - 1)))
        excerpt = draw(st.sampled_from([text[start:start + draw(st.integers(1, 40))], text, draw(words), "92%"]))
        bindings.append({"source_type": SOURCE_TYPE[TOOL_OF[type(result)]], "tool_name": TOOL_OF[type(result)],
                         "source_invocation_id": 7, "raw_path": path, "evidence_excerpt": excerpt})
    output = {"answer_version": "executor_evidence_v2", "hypotheses": [], "recommended_actions": [], "missing_info": [],
              "claims": [{"claim_id": "c1", "claim_type": "observation", "claim_text": "观察", "support_level": "direct",
                          "evidence_bindings": bindings}]}
    return result, output


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cited_outputs())
def test_the_gatekeeper_judges_a_view_as_it_judged_the_stored_list(case) -> None:
    result, output = case
    view, old = _invocations(result)
    on_view = check_executor_output("run-oracle", output, [view])
    on_list = check_executor_output("run-oracle", output, [old])
    assert on_view.gatekeeper_result.checked_bindings == on_list.gatekeeper_result.checked_bindings
    assert (on_view.verdict_ceiling, on_view.route) == (on_list.verdict_ceiling, on_list.route)
    assert on_view.verified_evidence == on_list.verified_evidence
