"""One verified invocation as the snapshot shows it under the Analysis that cites it.

Spec "Verified evidence snapshot is minimal and deterministic": stable source, scope, timestamp
and exact excerpts or bounded values, grouped by Analysis id, with no tool call id and no raw
response. The excerpt is made of the record's system-side evidence ref texts, verbatim:

- the top-level `summary` ref first: it states what was queried and how much was found, which
  is what a negative observation rests on;
- then, for each name the Analysis states (a series, a host, a key: words joined by `_`, `.` or
  `-`) that no ref picked so far shows, the most relevant ref that shows it;
- then the refs (per-item, and `<path>.summary` ones) that share the most terms (numbers, words,
  CJK bigrams) with the Analysis text, up to MAX_EXCERPT_REFS refs and MAX_EXCERPT_CHARS
  characters, shown in stored order, with a count of the refs left out. Among equally relevant
  refs, summaries come first, then stored order, so the same input gives the same snapshot.

Each ref shown is one excerpt line (a multi-line log entry's lines joined by spaces), and `facts`
has one entry per ref shown, in the same order (kind `unknown` where the stored result states
nothing readable for it), so the grounding checks read each line with what its ref states.

The timestamp is that of the first ref shown that has one (for the executor's tools: the end
of the queried window). `facts` holds what each ref shown states, in the excerpt's order, read from
the stored tool result (`shared.core.evidence_facts`); a ref whose facts cannot be read is left out of
`facts` (its line is still shown), so nothing it says can be bound to a claim's number.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from services.gatekeeper.tool_projections import ParsedProjection, is_scope_ref
from shared.core.contracts import EvidenceRef, RefFacts
from shared.core.evidence_facts import facts_reader
from shared.core.excerpt_match import normalize_for_match
from shared.draft_contract import SnapshotEvidence

MAX_EXCERPT_CHARS = 2000
MAX_EXCERPT_REFS = 16
MAX_REF_CHARS = 500
_WORD = re.compile(r"[a-z0-9_%][a-z0-9_%.:\-]*[a-z0-9_%]|[a-z0-9]")
_NUMBER = re.compile(r"\d+(?:\.\d+)?%?")
_CJK_RUN = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def analysis_terms(text: str) -> dict[str, int]:
    """Terms of an Analysis text with their weights: numbers 3, other words 2, CJK bigrams 1."""
    normal = normalize_for_match(text)
    terms: dict[str, int] = {}
    for word in _WORD.findall(normal):
        if len(word) >= 2 or word.isdigit():
            terms[word] = 3 if any(ch.isdigit() for ch in word) else 2
    for run in _CJK_RUN.findall(normal):
        for i in range(len(run) - 1):
            terms.setdefault(run[i : i + 2], 1)
    return terms


def _term_pattern(term: str) -> re.Pattern[str]:
    """A term found as a substring, except that digits never run on: `worker-1` does not match
    `worker-13`, while `10:59` still matches inside `2026-11-29t10:59:12z` (as in excerpt_match)."""
    if _NUMBER.fullmatch(term):
        # A bare value (`12`, `0.3`) is a value where it stands alone, never a piece of a date or
        # a time (`2026-12-07`, `04:12:00`): else every ref of the day matches the value 12.
        return re.compile(r"(?<![\d.:\-])" + re.escape(term) + r"(?![\d:\-]|\.\d)")
    before = r"(?<!\d)" if term[:1].isdigit() else ""
    after = r"(?!\d)" if term[-1:].isdigit() else ""
    return re.compile(before + re.escape(term) + after)


def _names(terms: dict[str, int]) -> list[str]:
    """The terms that are names (joined words: `http_error_ratio`, `db.example.com`), longest first."""
    names = [t for t in terms if len(t) >= 4 and any(c in t for c in "_.-") and any(c.isalpha() for c in t)]
    return sorted(names, key=lambda t: (-len(t), t))


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SnapshotBuilder:
    """Builds snapshot entries; normalises each ref text at most once per guard call."""

    def __init__(self) -> None:
        self._normal: dict[int, str] = {}
        self._keep: list[EvidenceRef] = []  # keeps refs alive so their id() stays unique
        # One parse of agent_result per invocation, however many Analyses cite it.
        self._readers: dict[int, Callable[[str], RefFacts | None]] = {}

    def _facts(self, parsed: ParsedProjection, refs: list[EvidenceRef]) -> list[RefFacts]:
        invocation = parsed.invocation
        read = self._readers.get(invocation.invocation_id)
        if read is None:
            read = self._readers[invocation.invocation_id] = facts_reader(invocation)
        # One entry per ref shown, in order (kind "unknown" where the record states nothing readable),
        # so that the i-th excerpt line and the i-th facts describe the same ref.
        return [(read(ref.raw_path) or RefFacts(kind="unknown")).model_copy(update={"raw_path": ref.raw_path})
                for ref in refs]

    def _normal_text(self, ref: EvidenceRef) -> str:
        key = id(ref)
        if key not in self._normal:
            self._normal[key] = normalize_for_match(ref.text)
            self._keep.append(ref)
        return self._normal[key]

    def _ranked(self, refs: list[EvidenceRef], terms: dict[str, int]) -> list[int]:
        """Indexes into refs, most relevant first; among equals scope refs first, then stored order."""
        patterns = [(_term_pattern(term), weight) for term, weight in terms.items()]
        keys = []
        for index, ref in enumerate(refs):
            text = self._normal_text(ref) if terms else ""
            score = sum(weight for pattern, weight in patterns if pattern.search(text))
            keys.append((-score, 0 if is_scope_ref(ref) else 1, index))
        keys.sort()
        return [index for _, _, index in keys]

    def entry(self, parsed: ParsedProjection, analysis_text: str, shown_paths: list[str] | None = None) -> SnapshotEvidence:
        """`shown_paths`: refs a typed statement cites, shown first whatever their relevance."""
        head = [ref for ref in parsed.scope_refs if ref.raw_path == "summary"][:1]
        rest = [ref for ref in parsed.scope_refs if all(ref is not h for h in head)] + parsed.item_refs
        used = sum(len(_bounded(ref.text, MAX_REF_CHARS)) + 1 for ref in head)
        picked: set[int] = set()
        for path in shown_paths or []:
            index = next((i for i, ref in enumerate(rest) if ref.raw_path == path), None)
            if index is not None and len(head) + len(picked) < MAX_EXCERPT_REFS:
                picked.add(index)
                used += len(_bounded(rest[index].text, MAX_REF_CHARS)) + 1
        terms = analysis_terms(analysis_text)
        ranked = self._ranked(rest, terms)
        # First the best ref for each name the Analysis states (a series, a host, a key): a cause
        # that names two series shows both, however many points of one outrank the other.
        for name in _names(terms):
            pattern = _term_pattern(name)
            if any(pattern.search(self._normal_text(ref)) for ref in head + [rest[i] for i in picked]):
                continue
            index = next((i for i in ranked if pattern.search(self._normal_text(rest[i]))), None)
            size = len(_bounded(rest[index].text, MAX_REF_CHARS)) + 1 if index is not None else 0
            if index is None or len(head) + len(picked) >= MAX_EXCERPT_REFS or used + size > MAX_EXCERPT_CHARS:
                continue
            picked.add(index)
            used += size
        for index in ranked:
            if index in picked:
                continue
            size = len(_bounded(rest[index].text, MAX_REF_CHARS)) + 1
            if len(head) + len(picked) >= MAX_EXCERPT_REFS or used + size > MAX_EXCERPT_CHARS:
                break
            picked.add(index)
            used += size
        shown = head + [rest[index] for index in sorted(picked)]
        # One line per ref shown (a multi-line entry's lines joined by spaces), then the count left out.
        lines = [" ".join(_bounded(ref.text, MAX_REF_CHARS).splitlines()) for ref in shown]
        if len(rest) > len(picked):
            lines.append(f"(+{len(rest) - len(picked)} more evidence ref(s) not shown)")
        invocation = parsed.invocation
        return SnapshotEvidence(
            tool_name=invocation.tool_name,
            source=parsed.source,
            scope=parsed.scope,
            timestamp=next((ref.timestamp for ref in shown if ref.timestamp), ""),
            excerpt="\n".join(lines),
            evidence_status=invocation.evidence_status,
            facts=self._facts(parsed, shown),
        )
