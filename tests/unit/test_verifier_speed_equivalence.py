"""The verifier made cheaper answers exactly what it answered before.

- Each claim's grounding findings are computed once per VerifierInput (`grounding_overlay.Grounding`):
  the embedded engine's pass and the servicer's pass read the same findings. The output must be
  the one both passes give when each computes everything afresh (as before): same checks, same
  details (the second pass still appends to the detail the first wrote), same verdict, same side
  texts. A Grounding never answers for another input, nor for another claim object of the same id.
- Presence tests skip their pattern where the literal text it needs is absent: a dictionary entry
  (`key_terms._entry_present`), a whole name, a version, an English word (`key_terms.term_present`)
  and an entity (`claim_features.entity_present`). Each must say what its pattern alone says (the
  oracle: the code as it was), on text generated from the dictionaries' own forms and their
  neighbours (letters, digits, `-`, `.`, `v`), derandomized so CI sees the same examples.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.engine import EmbeddedVerifierEngine
from services.verifier.grounding_overlay import Grounding, apply_grounding
from shared.core.contracts import ClaimCheck, VerifierInput, VerifierOutput
from shared.core.grounding import claim_features, key_terms
from shared.core.grounding.key_terms import EVENT_DICTIONARY, NOUN_DICTIONARY, KeyTerm
from shared.core.grounding.number_words import normalise
from tests.unit.test_causal_link import (
    CHANGE_REF,
    LINKED_TEXT,
    OBSERVATIONS,
    ONSET_REF,
    ROLLBACK,
    SIGNATURE_REF,
    UNLINKED_TEXT,
    UNRELATED_REF,
    make_input,
)

# --- one grounding per input ----------------------------------------------------------------------

HYPOTHESIS = "可能是 quill-indexer 的 shard.map.version=7 配置导致写入被拒"
INPUTS = {
    "linked": make_input([("c1", "root_cause", LINKED_TEXT, "indirect", [CHANGE_REF, SIGNATURE_REF, ONSET_REF]),
                          *OBSERVATIONS], actions=[ROLLBACK]),
    "unlinked": make_input([("c1", "root_cause", UNLINKED_TEXT, "indirect", [UNRELATED_REF, SIGNATURE_REF, ONSET_REF]),
                            *OBSERVATIONS], actions=[ROLLBACK, "重启 quill-indexer 的 qi-3 实例"]),
    "observations": make_input(OBSERVATIONS),
    "without evidence": make_input([("c1", "root_cause", UNLINKED_TEXT, "indirect", []), *OBSERVATIONS]),
}
_RAW = INPUTS["linked"].model_dump()
_RAW["verified_executor_output"]["hypotheses"] = [{"text": HYPOTHESIS}, {"text": "可能是 ledger-core 的 5xx 升高"}]
INPUTS["hypotheses"] = VerifierInput.model_validate(_RAW)


def _lenient(inp: VerifierInput) -> VerifierOutput:
    """A model verifier that calls every claim directly observed."""
    return VerifierOutput(verdict="PASS", groundedness_score=1.0, rationale="model", claim_checks=[
        ClaimCheck(claim_id=c.claim_id, claim_text=c.claim_text, claim_type=c.claim_type, verification="direct_observation")
        for c in inp.verified_executor_output.claims
    ])


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_the_servicer_pass_over_the_engines_grounding_is_the_fresh_one(name: str) -> None:
    inp = VerifierInput.model_validate(INPUTS[name].model_dump())
    run = EmbeddedVerifierEngine().verify(inp)
    assert run.output is not None and run.grounding is not None
    fresh = apply_grounding(inp, EmbeddedVerifier().verify(inp))
    assert apply_grounding(inp, run.output, run.grounding).model_dump() == fresh.model_dump()
    # The engine's own output is the fresh one too.
    assert run.output.model_dump() == EmbeddedVerifier().verify(inp).model_dump()


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_a_grounding_used_for_a_model_output_is_the_fresh_one(name: str) -> None:
    inp = INPUTS[name]
    grounding = Grounding(inp)
    first = apply_grounding(inp, _lenient(inp), grounding)
    assert first.model_dump() == apply_grounding(inp, _lenient(inp)).model_dump()
    # Asked again over the same findings (the engine's pass, then the servicer's).
    assert apply_grounding(inp, first, grounding).model_dump() == apply_grounding(inp, first).model_dump()


def test_a_grounding_answers_only_for_its_own_input_and_claims() -> None:
    linked, unlinked = INPUTS["linked"], INPUTS["unlinked"]
    grounding = Grounding(linked)
    # Another input (the same claim ids, other evidence): its own findings, not the kept ones.
    other = apply_grounding(unlinked, _lenient(unlinked), grounding)
    assert other.model_dump() == apply_grounding(unlinked, _lenient(unlinked)).model_dump()
    assert {c.claim_id: c.verification for c in other.claim_checks}["c1"] == "unsupported"
    # Another claim object with a kept id is read afresh.
    claim = linked.verified_executor_output.claims[0]
    kept = grounding.of(claim)
    assert grounding.of(claim) is kept
    changed = claim.model_copy(update={"claim_type": "observation", "claim_text": "quill-indexer 的写入被拒绝。"})
    assert kept.link is not None and kept.link.linked
    assert grounding.of(changed).link is None  # no cause asserted: no link asked


# --- presence tests skipped where their literal is absent -------------------------------------------


def _old_entry_present(dictionary_name: str, canonical: str, evidence: str) -> bool:
    return key_terms._entry_pattern(dictionary_name, canonical).search(evidence) is not None


_A = "a-z0-9_"


def _old_term_present(term: KeyTerm, evidence_text: str) -> bool:
    """term_present as it was: every pattern tried whatever the text."""
    evidence = key_terms._normal_evidence(evidence_text)
    text = normalise(term.text)
    if term.kind == "version":
        bare = text[1:] if text.startswith("v") else text
        if "." not in bare:
            return re.search(rf"(?<![{_A}.])v{re.escape(bare)}(?![0-9]|\.[0-9])", evidence) is not None
        return re.search(rf"(?<![{_A}.])v?{re.escape(bare)}(?![0-9]|\.[0-9])", evidence) is not None
    if term.kind in ("identifier", "person"):
        def whole(name: str) -> bool:
            return re.search(rf"(?<![{_A}-]){re.escape(name)}(?![{_A}])", evidence) is not None
        return whole(text) or (text.startswith("@") and whole(text[1:]))
    if term.kind == "event":
        canonicals = key_terms._events_of(text)
        if not canonicals:
            return text in evidence
        return any(_old_entry_present("event", c, evidence) for c in canonicals)
    if term.kind == "ascii_word":
        pattern = (rf"(?<![a-z]){re.escape(text)}|{re.escape(text)}(?![a-z])" if len(text) >= 5 and " " not in text
                   else rf"(?<![a-z]){re.escape(text)}(?![a-z])")
        if re.search(pattern, evidence):
            return True
        return any(_old_entry_present("noun", c, evidence) for c in key_terms._NOUN_OF.get(text, ()))
    if text in evidence:
        return True
    if any(_old_entry_present("noun", c, evidence) for c in key_terms._NOUN_OF.get(text, ())):
        return True
    parts = key_terms._cjk_parts(text)
    if len(parts) < 2 or not any(is_dict for _, is_dict in parts):
        return False
    for word, is_dict in parts:
        if is_dict:
            if not any(_old_entry_present("noun", c, evidence) for c in key_terms._NOUN_OF[word]):
                return False
        elif len(word) > 1 and word not in key_terms.OBSERVATION_VOCABULARY and word not in evidence:
            return False
    return True


def _forms(dictionary: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> list[str]:
    return sorted({form.rstrip("*=") for cjk, english in dictionary.values() for form in (*cjk, *english)})


_FORMS = _forms(NOUN_DICTIONARY) + _forms(EVENT_DICTIONARY)
_NAMES = ["payment-service", "db-01", "db-01.prod", "v3.2.0", "3.2.0", "v5", "5", "@ada.k", "ada.k", "shard_17",
          "cache.warmup.batch_size", "kafka", "redis", "jstack"]
_PIECE = st.one_of(
    st.sampled_from(_FORMS), st.sampled_from(_NAMES),
    st.sampled_from(["s", "es", "ed", "ing", "-", "_", ".", "v", "x", "7", " ", "，", "的", "\n", "abc", "服务"]),
)
_TEXT = st.lists(_PIECE, max_size=14).map("".join)
_KINDS = ["version", "identifier", "person", "event", "ascii_word", "cjk_noun"]


@settings(max_examples=1500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["noun", "event"]), st.data(), _TEXT)
def test_an_entry_is_present_where_its_pattern_matches(dictionary_name: str, data: st.DataObject, evidence: str) -> None:
    dictionary = EVENT_DICTIONARY if dictionary_name == "event" else NOUN_DICTIONARY
    canonical = data.draw(st.sampled_from(sorted(dictionary)))
    assert key_terms._entry_present(dictionary_name, canonical, evidence) == _old_entry_present(
        dictionary_name, canonical, evidence)


@settings(max_examples=3000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_KINDS), st.one_of(st.sampled_from(_FORMS), st.sampled_from(_NAMES), _TEXT), _TEXT)
def test_a_term_is_present_where_it_was(kind: str, text: str, evidence: str) -> None:
    if not text.strip():
        return
    term = KeyTerm(text, kind, (0, len(text)))
    assert key_terms.term_present(term, evidence) == _old_term_present(term, evidence)


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(st.sampled_from(_NAMES + _FORMS), _TEXT)
def test_an_entity_is_present_where_its_pattern_matches(entity: str, evidence: str) -> None:
    pattern = rf"(?<![{_A}-]){re.escape(entity)}(?![{_A}])"
    assert claim_features.entity_present(entity, evidence) == (re.search(pattern, evidence) is not None)
