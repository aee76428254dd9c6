"""The gatekeeper's faster excerpt checking decides as before.

`normalize_for_match` skips work that would change nothing: the format and punctuation
substitutions when one scan finds neither, the second NFKC when casefold changed nothing, and the
whitespace split and join on a printable text that is already single-spaced. The oracle is the
implementation it replaced, kept here verbatim. The gatekeeper's per-check caches (normal forms by
text, excerpt fragments by excerpt, catalog answers) give what a fresh computation gives.
"""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gatekeeper.excerpt_rules import ExcerptChecker
from services.gatekeeper.rule_catalog import (
    EXCERPT_MISMATCH,
    EXCERPT_TOO_SHORT,
    SCHEMA_EXECUTOR_V2,
    CheckParameters,
    RuleCatalog,
    load_rule_catalog,
)
from shared.core.contracts import EvidenceRef
from shared.core.excerpt_match import (
    _DROPPABLE_SPACE,
    _PUNCT_TABLE,
    excerpt_fragments,
    fragments_supported,
    match_normalized,
    normalize_for_match,
)
from shared.core.tool_results import RenderedRef

_OLD_PUNCT = re.compile("[" + re.escape("".join(_PUNCT_TABLE)) + "]")
_OLD_FORMAT = re.compile(r"[\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")


def old_normalize_for_match(text: str) -> str:
    """normalize_for_match as it was before its fast paths."""
    if text.isascii():
        text = text.lower()
    else:
        text = unicodedata.normalize("NFKC", text)
        text = _OLD_FORMAT.sub("", text)
        text = _OLD_PUNCT.sub(lambda match: _PUNCT_TABLE[match.group()], text).casefold()
        text = unicodedata.normalize("NFKC", text)
    text = " ".join(text.split())
    return _DROPPABLE_SPACE.sub("", text)


# Characters where a shortcut could go wrong: marks a removed format character lets compose (e +
# ZWSP + U+0301), characters casefold expands or decomposes (ß, ǰ, ΐ, İ, ﬁ), every kind of
# whitespace, compatibility forms, the punctuation table, CJK and the separators.
TRICKY = (
    "aZeE09 ,;:!?()[]<>\"'.%-_=/"
    "\u0301\u0308\u0327\u200b\u200c\u200d\u00ad\u2060\ufeff\u202a\u2028\u2029"
    "ßẞǰΐİıﬁﬀσςΣＡｚ１％，：（）Ⅻ㎒½"
    "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2007\u200a\u202f\u205f\u3000"
    "。｡、､·・“”„‟「」『』‘’‚‛【】〔〕〈〉《》—–‐‑‒―−〜⋯…"
    "支付服务超时连接池耗尽한국어ｶﾞ"
)


LOG_WORDS = ["ERROR", "timeout", "连接池", "耗尽", "92%", "p99=1.5s", "(db)", "“x”", "a\u200bb", "Ｐ９９"]
TEXTS = st.one_of(
    st.text(alphabet=TRICKY, max_size=80),
    st.text(max_size=60),
    st.lists(st.sampled_from(LOG_WORDS), max_size=60).map(" ".join),
    # ASCII and ideographs (the lower() path) beside characters just outside that range: CJK
    # extension A, a Kangxi radical and a compatibility ideograph (both change under NFKC), Yi.
    st.text(alphabet="aZ 9:,.\t\n\u4e00\u9fff连接池\u4dff\u3400\u2f00\uf900\ua000", max_size=40),
)


@settings(max_examples=6000, deadline=None)
@given(TEXTS)
def test_the_normal_form_is_the_old_one(text: str) -> None:
    assert normalize_for_match(text) == old_normalize_for_match(text)


def test_a_mark_separated_by_a_removed_format_character_still_composes() -> None:
    # The removal leaves e + U+0301, which the second NFKC composes: the shortcut must not skip it.
    assert normalize_for_match("cafe\u200b\u0301 连接") == old_normalize_for_match("cafe\u200b\u0301 连接") == "café连接"
    assert normalize_for_match("ǰ 支付") == old_normalize_for_match("ǰ 支付")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab 12.,%…连接", max_size=20), st.text(alphabet="ab 12.,%…连接", max_size=60))
def test_fragments_supported_is_the_match_s_verdict(excerpt: str, text: str) -> None:
    fragments = excerpt_fragments(excerpt)
    normal = normalize_for_match(text)
    assert fragments_supported(fragments, normal) == match_normalized(fragments, normal).supported


REF_TEXTS = ["payment-service cpu_usage=92% at 10:35", "ERROR 连接池 耗尽 after 3000ms", "WARN retry budget 15 exhausted"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["92%", "连接池耗尽", "3000ms", "retry", "budget 15", "2%", "ab", "WARN ... 15"]),
                          st.lists(st.sampled_from(REF_TEXTS), min_size=1, max_size=3)), min_size=1, max_size=12))
def test_one_checker_for_many_bindings_decides_as_a_fresh_one_each_time(cases) -> None:
    catalog = load_rule_catalog()
    shared = ExcerptChecker(CheckParameters(catalog))
    for excerpt, texts in cases:
        refs = [RenderedRef(f"hits[{i}]", text) for i, text in enumerate(texts)]
        assert shared.check(excerpt, refs) == ExcerptChecker(catalog).check(excerpt, refs)


def test_a_rendered_ref_and_its_evidence_ref_are_judged_alike() -> None:
    checker = ExcerptChecker(load_rule_catalog())
    rendered = RenderedRef("hits[0]", REF_TEXTS[1], "2026-12-01T10:00:00Z")
    listed = EvidenceRef(raw_path="hits[0]", text=REF_TEXTS[1], source="loki")
    assert checker.check("连接池 耗尽", [rendered])[1] == checker.check("连接池 耗尽", [listed])[1] == []
    assert checker.check("29%", [rendered])[1][0].rule == EXCERPT_MISMATCH
    assert checker.check("ab", [RenderedRef("hits[1]", "ab cd")])[1][0].rule == EXCERPT_TOO_SHORT


def test_check_parameters_answer_as_the_catalog_and_a_failing_lookup_fails_each_time() -> None:
    catalog = load_rule_catalog()
    parameters = CheckParameters(catalog)
    for rule_id, name in [(SCHEMA_EXECUTOR_V2, "max_excerpt_chars"), (EXCERPT_TOO_SHORT, "min_excerpt_chars")]:
        assert parameters.int_parameter(rule_id, name) == parameters.int_parameter(rule_id, name) == catalog.int_parameter(rule_id, name)
    assert parameters.is_enabled(EXCERPT_TOO_SHORT) == catalog.is_enabled(EXCERPT_TOO_SHORT)
    # A catalog nobody validated may hold a parameter int() refuses: every lookup raises, as before.
    odd = RuleCatalog.model_validate({"rule_set_version": "x", "rules": [
        {"id": EXCERPT_TOO_SHORT, "default_severity": "low_confid", "parameters": {"min_excerpt_chars": "many"}}]})
    unchecked = CheckParameters(odd)
    for _ in range(2):
        with pytest.raises(ValueError):
            unchecked.int_parameter(EXCERPT_TOO_SHORT, "min_excerpt_chars")
