"""Property: the executor's readers of an invocation's refs (`EvidenceView.cited_refs`)
see the paths and texts, in order, that the evidence view they replaced gives (`evidence_view(...).refs()`, the
oracle): for any typed result stored as a view, as an explicit list, unparsable, under another
tool's name, or without retrieval details. And the trace summary's facts kept per parsed result
are the facts read afresh (`_read_facts`, the replaced function's body)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.executor import trace_summary
from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import dump_result, ref_count, rendered_refs
from tests.unit.test_evidence_view_oracle import TOOL_OF, results

TOOLS = st.sampled_from(["query_metrics", "query_logs", "query_changes", "lookup_knowledge", "get_current_time"])


@st.composite
def invocations(draw: st.DrawFn) -> ToolInvocation:
    result = draw(results)
    tool = draw(st.just(TOOL_OF[type(result)]) | TOOLS)
    agent_result = draw(st.sampled_from([dump_result(result), "", "{", "[]", dump_result(result)[:-1]]))
    listed = [EvidenceRef(raw_path=r.raw_path, text=r.text, source=r.document or "estate-sql:x", timestamp=r.timestamp)
              for r in rendered_refs(result)]
    details = draw(st.sampled_from([
        RetrievalDetails(source="estate-sql:x", refs_rendered=True, ref_count=ref_count(result)),
        RetrievalDetails(evidence_refs=listed),
        RetrievalDetails(evidence_refs=listed[::-1], refs_rendered=False),
        None,
    ]))
    return ToolInvocation(invocation_id=1, run_id="r", tool_name=tool, lifecycle="READY",
                          evidence_status="EVIDENCE_FOUND", agent_result=agent_result, retrieval_details=details)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(invocations())
def test_the_refs_read_are_the_views(invocation: ToolInvocation) -> None:
    expected = [(ref.raw_path, ref.text) for ref in evidence_view(invocation).refs()]
    for _ in range(2):  # fresh, then from the result's kept rendering
        assert [(ref.raw_path, ref.text) for ref in evidence_view(invocation).cited_refs()] == expected


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(invocations(), min_size=1, max_size=4))
def test_an_invocations_kept_facts_are_the_facts_read_afresh(batch: list[ToolInvocation]) -> None:
    """The trace summary keeps each result's facts (by the parsed result); read afresh, they are
    the same, for every kind of stored call and whichever reads first."""
    expected = [trace_summary._read_facts(invocation) for invocation in batch]
    for _ in range(2):
        assert [trace_summary._facts(invocation) for invocation in batch] == expected
        for invocation, facts in zip(batch, expected):
            copy = invocation.model_copy()  # another reader of the same stored text
            assert trace_summary._facts(copy) == facts
