"""The causal link check (shared/core/grounding/causal_link.py) and how the verifier uses it: a change is
a cause only when it precedes the effect within the bound AND shares a distinctive token (by shape
and rarity in the run's evidence, never a word list) with the error signatures; an error
signature whose first line coincides with an onset is an event cause; anything else is a
hypothesis at most — for the embedded verifier and, through the grounding overlay, for any
model's claims."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.grounding_overlay import apply_grounding
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    DiagnosisContext,
    EvidenceBinding,
    ExecutorEvidenceV2,
    GatekeeperResult,
    RecommendedAction,
    RefFacts,
    StatedValue,
    VerifiedEvidence,
    VerifierInput,
    VerifierOutput,
)
from shared.core.grounding import check_ids
from shared.core.grounding.causal_link import (
    CHANGE_BEFORE_EFFECT_MIN,
    Corpus,
    LinkEnd,
    check_link,
    distinctive_shapes,
    mask_link_minutes,
    shared_tokens,
)

T0 = datetime(2031, 5, 6, 7, 0, tzinfo=UTC)


def _iso(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


# An estate the code has never seen: a release of quill-indexer whose record names the shard map
# its error lines name; an unrelated release of the same service; the metric's onset.
CHANGE = f"{_iso(0)} deploy quill-indexer by ada.k: quill-indexer 发布 v9.1.3：切换 shard.map.version=7"
UNRELATED = f"{_iso(0)} deploy quill-indexer by ada.k: quill-indexer 发布 4.0.2：更新帮助文档链接"
SIGNATURE = (f"{_iso(4)} ERROR quill-indexer host=qi-3 index write rejected: shard.map.version=7 "
             f"has no owner for shard_17 trace=9f8e7d6c5b4a39281706")
ONSET = f"quill-indexer write_rejects_per_second onset at {_iso(3)}: rising from 0/s (median before) to 4.2/s (median after)"
POINT = f"quill-indexer write_rejects_per_second=4.5/s at {_iso(20)}"
OTHER_LOG = f"{_iso(9)} WARN quill-indexer host=qi-1 slow merge took 2400ms segment=seg_88"


def _ref(kind: str, text: str, at: str, **more) -> tuple:
    tool = {"change": "query_changes", "log_line": "query_logs", "metric_onset": "query_metrics",
            "metric_point": "query_metrics"}[kind]
    path = {"change": "changes[0]", "log_line": "hits[0]", "metric_onset": "series[0].onset",
            "metric_point": "series[0].points[20]"}[kind]
    facts = RefFacts(kind=kind, subject="quill-indexer", at=at, **more)
    return tool, {"change": 1, "log_line": 2}.get(kind, 3), path, text, facts


CHANGE_REF = _ref("change", CHANGE, _iso(0))
UNRELATED_REF = _ref("change", UNRELATED, _iso(0))
SIGNATURE_REF = _ref("log_line", SIGNATURE, _iso(4), level="ERROR")
ONSET_REF = _ref("metric_onset", ONSET, _iso(3), metric="write_rejects_per_second", level="up",
                 values=[StatedValue(name="before", value=0, unit="/s"), StatedValue(name="after", value=4.2, unit="/s", at=_iso(3))])
POINT_REF = _ref("metric_point", POINT, _iso(20), metric="write_rejects_per_second",
                 values=[StatedValue(name="value", value=4.5, unit="/s", at=_iso(20))])
OTHER_REF = ("query_logs", 2, "hits[5]", OTHER_LOG, RefFacts(kind="log_line", subject="quill-indexer", at=_iso(9), level="WARN"))


def make_input(items, actions=()) -> VerifierInput:
    claims, evidence = [], []
    for claim_id, claim_type, text, support, refs in items:
        claims.append(Claim(
            claim_id=claim_id, claim_type=claim_type, claim_text=text, support_level=support,
            evidence_bindings=[EvidenceBinding(tool_name=t, source_invocation_id=i, source_invocation_ids=[i], raw_path=p,
                                               evidence_excerpt=m[:20]) for t, i, p, m, _ in refs],
        ))
        evidence += [VerifiedEvidence(claim_id=claim_id, source_invocation_id=i, tool_name=t, raw_path=p, matched_text=m, facts=f)
                     for t, i, p, m, f in refs]
    return VerifierInput(
        diagnosis_context=DiagnosisContext(query="quill-indexer 为什么写入失败？"),
        verified_executor_output=ExecutorEvidenceV2(claims=claims, recommended_actions=[RecommendedAction(text=a) for a in actions]),
        verified_evidence=evidence, gatekeeper_audit=GatekeeperResult(status="pass", severity="none"), verdict_ceiling="PASS",
    )


OBSERVATIONS = [
    ("o1", "symptom", f"quill-indexer 的 write_rejects_per_second 在 {_iso(20)} 达到 4.5/s。", "direct", [POINT_REF]),
    ("o2", "observation", f"quill-indexer 在 {_iso(9)} 出现 WARN 日志：「slow merge took 2400ms」。", "direct", [OTHER_REF]),
]
LINKED_TEXT = (f"quill-indexer 在 {_iso(0)} 的 deploy 变更「quill-indexer 发布 v9.1.3：切换 shard.map.version=7」很可能是 "
               f"write_rejects_per_second 升高（约自 {_iso(3)} 起）的原因：变更内容与 ERROR 日志都出现 shard.map.version=7，"
               f"变更早于异常开始约 3 分钟。")
UNLINKED_TEXT = (f"quill-indexer 在 {_iso(0)} 的 deploy 变更「quill-indexer 发布 4.0.2：更新帮助文档链接」很可能是 "
                 f"write_rejects_per_second 升高（约自 {_iso(3)} 起）的原因。")


# --- tokens -----------------------------------------------------------------------------------------


def test_distinctive_is_a_matter_of_shape():
    tokens = distinctive_shapes(CHANGE + " " + SIGNATURE)
    assert {"v9.1.3", "shard.map.version=7", "shard.map.version", "shard_17", "qi-3", "ada.k"} <= tokens
    assert not tokens & {"index", "write", "rejected", "deploy", "error", "7", "2400ms"}
    assert not any(t.startswith("2031") for t in tokens)  # timestamps are no tokens
    assert "4.0.2" in distinctive_shapes(UNRELATED) and "ruleset" in distinctive_shapes("ruleSet=v2")
    assert "/srv/data/blobs" in distinctive_shapes("open '/srv/data/blobs/x.bin' failed path=/srv/data/blobs/")


def test_rarity_comes_from_this_runs_evidence():
    corpus = Corpus.of([CHANGE, SIGNATURE, ONSET, POINT, OTHER_LOG], ["quill-indexer"])
    assert shared_tokens(CHANGE, [SIGNATURE], corpus)[0] == "shard.map.version=7"
    # The service name has the shape, but it is everywhere (and a subject): never distinctive.
    assert "quill-indexer" not in shared_tokens(CHANGE, [SIGNATURE], corpus)
    assert shared_tokens(UNRELATED, [SIGNATURE], corpus) == []
    # A token found in every group of the run's evidence is not rare, whatever its shape.
    crowded = Corpus.of([CHANGE, SIGNATURE], [])
    assert shared_tokens(CHANGE, [SIGNATURE], crowded) == []
    # Lines of one template are one group: sixty points of a series do not dilute anything.
    points = [f"quill-indexer write_rejects_per_second={k}/s at {_iso(k)}" for k in range(60)]
    assert len(Corpus.of(points).groups) == 1


# --- the link ---------------------------------------------------------------------------------------


def _end(kind: str, text: str, minutes: float) -> LinkEnd:
    return LinkEnd(kind, text, T0 + timedelta(minutes=minutes), "quill-indexer")


CORPUS = Corpus.of([CHANGE, UNRELATED, SIGNATURE, ONSET, POINT, OTHER_LOG], ["quill-indexer"])


def test_a_change_that_precedes_and_shares_a_token_is_linked():
    link = check_link([_end("change", CHANGE, 0), _end("signature", SIGNATURE, 4), _end("onset", ONSET, 3)], CORPUS)
    assert link.linked and link.kind == "change" and link.minutes == 3 and "shard.map.version=7" in link.tokens


def test_a_change_that_merely_came_first_is_not_linked():
    link = check_link([_end("change", UNRELATED, 0), _end("signature", SIGNATURE, 4), _end("onset", ONSET, 3)], CORPUS)
    assert not link.linked and "no distinctive token" in link.detail


@pytest.mark.parametrize("change_at", [5, -(CHANGE_BEFORE_EFFECT_MIN + 1), -600])
def test_a_change_after_the_onset_or_long_before_is_not_linked(change_at):
    link = check_link([_end("change", CHANGE, change_at), _end("signature", SIGNATURE, 4), _end("onset", ONSET, 3)], CORPUS)
    assert not link.linked


def test_coinciding_onsets_link_an_event_never_a_change():
    assert check_link([_end("signature", SIGNATURE, 4), _end("onset", ONSET, 3)], CORPUS).kind == "event"
    assert not check_link([_end("signature", SIGNATURE, 14), _end("onset", ONSET, 3)], CORPUS).linked
    # A change cited with coinciding onsets is still judged as a change: by its token.
    assert not check_link([_end("change", UNRELATED, 3), _end("signature", SIGNATURE, 4), _end("onset", ONSET, 3)], CORPUS).linked
    # Across services only when the line names the anomalous service.
    other = LinkEnd("onset", ONSET, T0 + timedelta(minutes=3), "ledger-core")
    assert not check_link([_end("signature", SIGNATURE, 4), other], CORPUS).linked
    naming = LinkEnd("signature", SIGNATURE + " upstream=ledger-core", T0 + timedelta(minutes=4), "quill-indexer")
    assert check_link([naming, other], CORPUS).kind == "event"


def test_the_minutes_the_link_checked_are_not_read_as_a_value():
    link = check_link([_end("change", CHANGE, 0), _end("signature", SIGNATURE, 4), _end("onset", ONSET, 3)], CORPUS)
    assert "3 分钟" not in mask_link_minutes("变更早于异常开始约 3 分钟", link)
    assert "30 分钟" in mask_link_minutes("变更早于异常开始约 30 分钟", link)


# --- the verifier -----------------------------------------------------------------------------------


def _checks(out: VerifierOutput) -> dict[str, ClaimCheck]:
    return {c.claim_id: c for c in out.claim_checks}


def test_embedded_verifier_linked_root_cause_is_a_reasonable_inference_and_can_pass():
    inp = make_input([("c1", "root_cause", LINKED_TEXT, "indirect", [CHANGE_REF, SIGNATURE_REF, ONSET_REF]), *OBSERVATIONS])
    out = EmbeddedVerifier().verify(inp)
    assert _checks(out)["c1"].verification == "reasonable_inference", _checks(out)["c1"].detail
    assert out.verdict == "PASS"  # a reasonable_inference critical claim beside direct observations


def test_embedded_verifier_unrelated_change_is_unsupported():
    inp = make_input([("c1", "root_cause", UNLINKED_TEXT, "indirect", [UNRELATED_REF, SIGNATURE_REF, ONSET_REF]), *OBSERVATIONS])
    check = _checks(EmbeddedVerifier().verify(inp))["c1"]
    assert check.verification == "unsupported" and "no checked causal link" in check.detail


def test_a_directly_observed_change_is_an_observation():
    text = f"quill-indexer 在 {_iso(0)} 有一次 deploy 变更（执行人 ada.k）：「quill-indexer 发布 4.0.2：更新帮助文档链接」。"
    inp = make_input([("c1", "observation", text, "direct", [UNRELATED_REF])])
    assert _checks(EmbeddedVerifier().verify(inp))["c1"].verification == "direct_observation"


class _LenientModel:
    """What a lying model verifier says: every claim is directly observed."""

    @staticmethod
    def verify(inp: VerifierInput) -> VerifierOutput:
        return VerifierOutput(verdict="PASS", groundedness_score=1.0, rationale="model", claim_checks=[
            ClaimCheck(claim_id=c.claim_id, claim_text=c.claim_text, claim_type=c.claim_type, verification="direct_observation")
            for c in inp.verified_executor_output.claims
        ])


def test_a_model_claim_linking_an_unrelated_change_is_unsupported_after_the_overlay():
    inp = make_input([("c1", "root_cause", UNLINKED_TEXT, "indirect", [UNRELATED_REF, SIGNATURE_REF, ONSET_REF]), *OBSERVATIONS])
    check = _checks(apply_grounding(inp, _LenientModel.verify(inp)))["c1"]
    assert check.verification == "unsupported" and check.check_id == check_ids.CAUSAL_LINK


def test_a_model_claim_with_a_linked_change_is_a_reasonable_inference_never_an_observation():
    inp = make_input([("c1", "root_cause", LINKED_TEXT, "indirect", [CHANGE_REF, SIGNATURE_REF, ONSET_REF]), *OBSERVATIONS])
    out = apply_grounding(inp, _LenientModel.verify(inp))
    assert _checks(out)["c1"].verification == "reasonable_inference"
    assert _checks(out)["c1"].check_id == check_ids.CAUSAL_LINK


def test_an_observation_claim_that_asserts_a_cause_needs_the_link_too():
    text = f"quill-indexer 在 {_iso(0)} 的发布 4.0.2 导致 write_rejects_per_second 升高。"
    inp = make_input([("c1", "observation", text, "direct", [UNRELATED_REF, SIGNATURE_REF, ONSET_REF])])
    assert _checks(apply_grounding(inp, _LenientModel.verify(inp)))["c1"].verification == "unsupported"


def test_the_check_id_is_documented():
    assert check_ids.CAUSAL_LINK in check_ids.ALL_CHECK_IDS


ROLLBACK = "核对该变更后，按变更回滚流程处理"


def _action_shown(out: VerifierOutput) -> bool:
    return next(c for c in out.side_text_checks if c.item == "recommended_actions[0]").shown


def test_rollback_advice_is_shown_only_with_a_verified_linked_change():
    unlinked = make_input([("c1", "root_cause", UNLINKED_TEXT, "indirect", [UNRELATED_REF, SIGNATURE_REF, ONSET_REF]),
                           *OBSERVATIONS], actions=[ROLLBACK])
    out = apply_grounding(unlinked, _LenientModel.verify(unlinked))
    assert not _action_shown(out)
    assert next(c for c in out.side_text_checks if c.item == "recommended_actions[0]").check_id == check_ids.CAUSAL_LINK
    linked = make_input([("c1", "root_cause", LINKED_TEXT, "indirect", [CHANGE_REF, SIGNATURE_REF, ONSET_REF]),
                         *OBSERVATIONS], actions=[ROLLBACK])
    assert _action_shown(apply_grounding(linked, EmbeddedVerifier().verify(linked)))
