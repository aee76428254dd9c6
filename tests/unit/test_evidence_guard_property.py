"""Property: EvidenceGuard's verdict on generated Drafts equals an independent statement of the
spec's rules, it never raises, and its snapshot never carries a tool call id or evidence the
Draft did not genuinely cite."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.gatekeeper.evidence_guard import guard_draft
from tests.unit.test_evidence_guard import RUN, run_invocations

ROWS = run_invocations()
# Which tool call ids each kind may genuinely cite in this run; every other id is bad for it.
VALID_FOR = {"NORMAL": {"call-logs", "call-cpu"}, "NEGATIVE_OBSERVATION": {"call-nohit"}}
BAD_CALLS = ["call-projecting", "call-error", "call-ready-error", "call-no-result", "call-foreign", "call-made-up", "", " "]


ANY_CALL = st.sampled_from(["call-logs", " call-logs ", "call-cpu", "call-nohit", *BAD_CALLS])


def mostly(draw, good, bad, one_in: int = 30):
    """`good` (a strategy), or once in `one_in` draws `bad`: Drafts stay mostly valid, so both
    verdicts occur often, and every corruption still shows up in every run."""
    return draw(bad) if draw(st.integers(0, one_in - 1)) == 0 else draw(good)


@st.composite
def drafts(draw):
    analyses = []
    for index in range(mostly(draw, st.integers(1, 4), st.just(0))):
        kind = mostly(draw, st.sampled_from(["NORMAL", "NEGATIVE_OBSERVATION"]), st.none())
        good = st.sampled_from(sorted(VALID_FOR.get(kind) or VALID_FOR["NORMAL"]))
        calls = [mostly(draw, good, ANY_CALL) for _ in range(mostly(draw, st.integers(1, 3), st.just(0)))]
        analyses.append({
            "analysis_id": mostly(draw, st.just(f"a{index}"), st.sampled_from(["a0", "", " ", f" a{index} "])),
            "kind": kind,
            "text": mostly(draw, st.just("upstream timeout"), st.sampled_from(["", " \n"])),
            "tool_call_ids": calls,
        })
    ids = [a["analysis_id"] for a in analyses] or ["a0"]

    def item():
        count = mostly(draw, st.integers(1, 3), st.just(0))
        return {
            "text": mostly(draw, st.just("检查 db-primary"), st.sampled_from(["", " "])),
            "analysis_refs": [mostly(draw, st.sampled_from(ids), st.sampled_from(["a9", "", " "])) for _ in range(count)],
        }

    return {
        "conclusion": item() if draw(st.booleans()) else None,
        "analyses": analyses,
        "action_plan": [item() for _ in range(draw(st.integers(0, 2)))],
        "recommendations": [item() for _ in range(draw(st.integers(0, 2)))],
    }


def expected_pass(draft: dict) -> bool:
    """The spec's rules for a concluded Draft, stated directly."""
    ids = [a["analysis_id"] for a in draft["analyses"]]  # compared exactly as written
    if any(not i.strip() for i in ids) or len(set(ids)) != len(ids):
        return False
    for analysis in draft["analyses"]:
        if analysis["kind"] not in VALID_FOR or not analysis["text"].strip():
            return False
        calls = analysis["tool_call_ids"]
        if not calls or any(c not in VALID_FOR[analysis["kind"]] for c in calls):
            return False
    for item in [draft["conclusion"], *draft["action_plan"], *draft["recommendations"]]:
        if not item["text"].strip() or not item["analysis_refs"]:
            return False
        if any(ref not in ids for ref in item["analysis_refs"]):
            return False
    return True


@settings(max_examples=1000, deadline=None)
@given(drafts())
def test_guard_verdict_equals_the_rules(draft):
    result = guard_draft(RUN, draft, ROWS)
    text = result.snapshot.model_dump_json()
    assert not any(row.tool_call_id in text for row in ROWS)
    assert "FOREIGN-MARKER" not in result.model_dump_json() and "UNREFERENCED-MARKER" not in text
    if draft["conclusion"] is not None:
        assert result.passed == expected_pass(draft), result.violations
        assert result.passed == (result.violations == [])
        if not result.passed:
            assert result.snapshot.analyses == []
        return
    # conclusion=null: accepted; only genuine, kind-consistent references are published.
    assert result.passed
    published: dict[str, set[str]] = {}
    excluded: list[str] = []
    for analysis in draft["analyses"]:
        for call in analysis["tool_call_ids"]:
            if not call.strip():
                continue
            if call in VALID_FOR.get(analysis["kind"], set()):
                published.setdefault(analysis["analysis_id"], set()).add(call)
            elif call not in excluded:
                excluded.append(call)
    assert result.excluded_tool_call_ids == excluded
    assert {g.analysis_id: len(g.evidence) for g in result.snapshot.analyses} == {k: len(v) for k, v in published.items()}


@settings(max_examples=300, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["conclusion", "analyses", "analysis_id", "kind", "text", "tool_call_ids", "analysis_refs"]), inner, max_size=4),
    max_leaves=20,
))
def test_arbitrary_json_never_raises_and_never_passes_a_conclusion_unchecked(value):
    result = guard_draft(RUN, value, ROWS)
    if result.passed and isinstance(value, dict) and value.get("conclusion") is not None:
        assert expected_pass({"action_plan": [], "recommendations": [], **value})
