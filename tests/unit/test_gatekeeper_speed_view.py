"""The gatekeeper reads cited refs as rendered and gets what the contract's refs hold.

`EvidenceView.cited_at` is `at` without an EvidenceRef per binding: for any typed result, stored as
a view or as the full list it replaced, and any raw_path, it finds the same refs (path and text) in
the same order. A view counts its refs once and still counts what `ref_count` counts.
`as_evidence_ref` now validates four strings instead of calling `model_construct`: the same model.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.contracts import EvidenceRef
from shared.core.evidence_view import EvidenceView, as_evidence_ref
from shared.core.tool_results import LogHit, LogsResult, RenderedRef, ref_count, rendered_refs
from tests.unit.test_evidence_view_oracle import _invocations, near_paths, results


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(results, st.lists(near_paths, max_size=4))
def test_cited_refs_are_the_refs_at_that_path(result, extra_paths) -> None:
    view_row, list_row = _invocations(result)
    paths = [ref.raw_path for ref in rendered_refs(result)] + extra_paths
    for row in (view_row, list_row):
        view = EvidenceView(row)
        for path in paths:
            cited = [(ref.raw_path, ref.text) for ref in view.cited_at(path)]
            assert cited == [(ref.raw_path, ref.text) for ref in view.at(path)]
        assert view.count() == view.count() == ref_count(result) == len(view.refs())


def test_an_invocation_without_details_cites_nothing() -> None:
    hit = LogHit(ts="2026-12-01T10:00:00Z", level="ERROR", message="连接池 耗尽")
    row, _ = _invocations(LogsResult(tool="query_logs", total_matches=1, returned=1, hits=[hit], summary="1 line"))
    bare = row.model_copy(update={"retrieval_details": None})
    assert EvidenceView(bare).cited_at("hits[0]") == ()
    assert EvidenceView(bare).count() == 0


@given(st.text(max_size=20), st.text(max_size=40), st.text(max_size=10), st.text(max_size=10), st.text(max_size=10))
def test_as_evidence_ref_builds_the_model_model_construct_built(path, text, stamp, document, source) -> None:
    rendered = RenderedRef(path, text, stamp, document)
    built = as_evidence_ref(rendered, source)
    constructed = EvidenceRef.model_construct(raw_path=path, text=text, source=document or source, timestamp=stamp)
    assert built == constructed
    assert built.model_fields_set == constructed.model_fields_set
    assert built.model_dump_json() == constructed.model_dump_json()

