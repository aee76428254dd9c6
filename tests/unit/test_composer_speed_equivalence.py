"""The composer's and gatekeeper's text readers made cheaper say exactly what they said.

- `output_check.Terms.add` splits only compound words into their parts, converts each distinct
  number once, and looks for citations and raw paths only in a text holding `#` or `[`: the terms
  it collects must be those of the code as it was (the oracle below), numbers, words, parts,
  citations, raw paths and the causal flag alike.
- `symptom_lexicon.find_symptoms` searches a symptom's patterns only in a text holding one of their
  literal parts (`text_scan.literal_part`): it must find the symptoms the plain search finds.
- `executor_contract.unknown_field_warnings` formats an item's place only for an unknown field:
  the warnings must be those of a plain scan that formats every place.

Inputs: texts generated from the lexicon's own words, names, numbers, citations, raw paths and
separators, derandomized so CI sees the same examples.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core import output_check
from shared.core.output_check import CAUSAL, Terms
from shared.core.symptom_lexicon import _QUERY_PATTERN, SYMPTOMS, find_symptoms
from shared.executor_contract import (
    _KNOWN_BINDING,
    _KNOWN_CLAIM,
    _KNOWN_ITEM,
    _KNOWN_TOP,
    unknown_field_warnings,
)
from shared.text_scan import literal_part


def _old_terms(texts: list[str]) -> Terms:
    terms = Terms()
    for text in texts:
        normal = output_check._normal(text)
        terms.numbers |= {output_check._number(n) for n in output_check._NUMBER.findall(normal)}
        words = set(output_check._WORD.findall(normal))
        terms.words |= words | {part for word in words for part in re.split(r"[-_.]", word) if part}
        terms.citations |= {(tool, number) for tool, number in output_check._CITATION.findall(normal)}
        terms.raw_paths |= set(output_check._RAW_PATH.findall(normal))
        terms.causal = terms.causal or bool(CAUSAL.search(normal))
    return terms


_PIECES = st.sampled_from([
    "payment-service", "cpu_usage", "db-01.prod", "v3.2.0", "92", "92.0", "0.5", "1,200", "３０", "Ｃｐｕ", "HTTP 503",
    "query_metrics #3", "query_logs#12", "# 4", "series[0].points[41]", "hits[2]", "changes[0].id", "[", "]", "#",
    "导致", "because", "caused by", "根因", "延迟", "升高", "，", "。", " ", "\n", "-", "_", ".", "a", "x9", "ǅ", "ﬁ",
])
_TEXTS = st.lists(st.lists(_PIECES, max_size=12).map("".join), max_size=4)


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(_TEXTS)
def test_terms_are_those_of_the_code_as_it_was(texts: list[str]) -> None:
    assert output_check.terms_of(texts) == _old_terms(texts)


_SYMPTOM_WORDS = sorted({literal_part(p) for s in SYMPTOMS for p in s.query_patterns} - {""})


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_SYMPTOM_WORDS), st.sampled_from(
    ["s", "es", "504", "503", "p99", "p95", " ", "x", "的", "率", "LOAD", "Errors", "\n", "-", "0", "4"])), max_size=10).map("".join))
def test_symptoms_are_those_the_plain_search_finds(text: str) -> None:
    lowered = text.lower()
    assert find_symptoms(text) == [s.id for s in SYMPTOMS if _QUERY_PATTERN[s.id].search(lowered)]


@pytest.mark.parametrize(("pattern", "literal"), [
    ("cpu", "cpu"), (r"\bload\b", "load"), (r"\b50[0-4]\b", "50"), (r"\berrors?\b", "error"), ("ab+", "ab"),
    ("ab*c", "a"), ("x{2}", ""), ("a|b", ""), ("(?:a)", ""), (r"\d+x", ""), ("^a", ""), ("timed out", "timed out"),
])
def test_the_literal_part_of_a_pattern(pattern: str, literal: str) -> None:
    assert literal_part(pattern) == literal


@pytest.mark.parametrize("pattern", [p for s in SYMPTOMS for p in s.query_patterns])
def test_every_match_of_a_symptom_pattern_holds_its_literal_part(pattern: str) -> None:
    literal = literal_part(pattern)
    for sample in ("cpu load 5xx 500 503 504 errors error rate p99 p95 slow rt timed out", literal, literal + "s"):
        for match in re.finditer(pattern, sample):
            assert literal in match.group(0)


def _old_unknown_field_warnings(raw: dict[str, Any], limit: int = 20) -> list[str]:
    warnings: list[str] = []
    more = 0

    def scan(where: str, item: Any, known: frozenset[str]) -> None:
        nonlocal more
        if not isinstance(item, dict):
            return
        for position, key in enumerate(item):
            if key in known:
                continue
            if len(warnings) < limit:
                # By position only: a field name is the executor's own string.
                warnings.append(f"{where}.keys[{position}]: unknown field ignored")
            else:
                more += 1

    scan("output", raw, _KNOWN_TOP)
    claims = raw.get("claims")
    for i, claim in enumerate(claims if isinstance(claims, list) else []):
        scan(f"claims[{i}]", claim, _KNOWN_CLAIM)
        bindings = claim.get("evidence_bindings") if isinstance(claim, dict) else None
        for j, binding in enumerate(bindings if isinstance(bindings, list) else []):
            scan(f"claims[{i}].evidence_bindings[{j}]", binding, _KNOWN_BINDING)
    for name, known in _KNOWN_ITEM.items():
        items = raw.get(name)
        for i, item in enumerate(items if isinstance(items, list) else []):
            scan(f"{name}[{i}]", item, known)
    if more:
        warnings.append(f"{more} further unknown field(s) ignored")
    return warnings


_KEYS = st.sampled_from(sorted(_KNOWN_TOP | _KNOWN_CLAIM | _KNOWN_BINDING | {"confidence", "{x}", "note", "a" * 80}))
_ITEM = st.one_of(st.dictionaries(_KEYS, st.just(1), max_size=5), st.just("text"), st.just(None))
_CLAIM = st.one_of(st.dictionaries(_KEYS, st.just(1), max_size=4).flatmap(
    lambda d: st.lists(_ITEM, max_size=3).map(lambda b: {**d, "evidence_bindings": b})), _ITEM)


@settings(max_examples=800, derandomize=True, deadline=None)
@given(st.fixed_dictionaries({"claims": st.lists(_CLAIM, max_size=4)}, optional={
    "hypotheses": st.lists(_ITEM, max_size=3), "recommended_actions": st.lists(_ITEM, max_size=3),
    "missing_info": st.lists(_ITEM, max_size=3), "confidence": st.just(1)}), st.integers(0, 25))
def test_unknown_field_warnings_are_those_of_the_code_as_it_was(raw: dict[str, Any], limit: int) -> None:
    assert unknown_field_warnings(raw, limit) == _old_unknown_field_warnings(raw, limit)
