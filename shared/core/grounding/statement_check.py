"""What a model-written statement may say, given the refs it cites: the deterministic grounding
checks that run after every verifier and SemanticGuard engine, embedded or model.

A statement is checked against its cited refs only, each with its system-side text and the facts
read from the stored tool result (`RefFacts`: subject, metric, time or window, values, unit). The
checks, each with its id (`check_ids.py`), in the order they run:

1. Key terms (`key_term.absent`): every name, version, person, ASCII word, CJK noun phrase and
   event of the statement occurs in the cited evidence (across Chinese and English by the
   documented dictionaries of `key_terms.py`). A key entity, an error code or a term of an
   asserted cause that is absent is a fabrication (`fabricated_key`): REJECT, never retried.
2. Values bound to what they measure (`value.binding`, `number.words` for numbers in words): a
   quantity is supported only by a cited ref that states it for the same subject (when the
   statement names one), the same metric (named, or by metric family) and the same time (when
   its clause names one; times compared as instants with their zones). A metric value in a
   statement that names no metric is not bound to anything. A ref that states another value for
   the same subject, metric and time contradicts it.
3. Comparisons (`value.comparison`): 峰值/最高 need a summary whose max is the value, 最低 its
   min, 中位数 its median, 仅为/只有/低至 a summary whose median is not below it; A 高于 B and
   A 低于 B must hold between the two values; 翻倍/N 倍 need two cited values of one series in
   that ratio.
4. Vague quantifiers (`number.vague`): 多次 needs two observations, 大量 ten, 明显升高 a change
   of 1.5x within one series, 少量 at most five; a quantity word outside the closed lists
   (几十次, 上千条) is never accepted (`number.words`).
5. Polarity: a candidate cause excluded (`polarity.exclusion`) is never a confirmed
   observation; absence or health (`polarity.negation`) needs a search over the right scope
   that found nothing (subject, log level) or a summary of the named metric, and is contradicted
   by a cited finding of what it denies; a universal statement (`polarity.absolute`, 均在 3000ms
   内完成) needs a summary whose maximum is within the bound and is contradicted by a cited value
   beyond it or a cited error line.
6. Unhedged causes (`causal.unhedged`, statements outside a claim's own causal judgement): a
   cause asserted without a hedge token (可能, 疑似 …; 不可能 is not one) that the incident
   evidence does not state.

Findings carry the verification they imply (contradicted, external_unknown, unsupported,
overstated); the caller keeps the lower of that and its engine's classification.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from shared.core.contracts import RefFacts, StatedValue
from shared.core.grounding import check_ids
from shared.core.grounding.claim_features import Quantity, entity_present, extract, normalise
from shared.core.grounding.key_terms import key_terms, term_present
from shared.core.grounding.number_words import (
    WordQuantity,
    find_unaccepted_quantities,
    find_vague,
    find_word_quantities,
)
from shared.core.grounding.polarity import find_absolutes, find_causal, find_exclusions, find_negations, is_hedged
from shared.core.grounding.statement_times import NamedTime, named_times, parse_iso
from shared.core.log_levels import BAD_LEVELS
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE
from shared.text_scan import per_text_cache

# Lower is worse; the caller keeps the lower of the engine's and the checks' classification.
VERIFICATION_RANK: dict[str, int] = {
    "contradicted": 0,
    "external_unknown": 1,
    "unsupported": 2,
    "overstated": 3,
    "reasonable_inference": 4,
    "direct_observation": 5,
}
_CLAUSE_BREAK = re.compile(r"[，,；;。！？!?\n]|(?<=\D)\.(?=\s|$)")
_MAX_WORDS = re.compile(r"峰值|最高|最大|高峰|顶峰|(?<![a-z0-9_.\-])(?:peak|max|maximum|highest)(?![a-z0-9_.\-])")
_MIN_WORDS = re.compile(r"最低|最小|谷值|低谷|(?<![a-z0-9_.\-])(?:min|minimum|lowest)(?![a-z0-9_.\-])")
_MEDIAN_WORDS = re.compile(r"中位数|(?<![a-z0-9_.\-])median(?![a-z0-9_.\-])")
_LOW_WORDS = re.compile(r"仅为|只有|仅仅|仅约|仅|低至|(?<![a-z0-9_.\-])only(?![a-z0-9_.\-])")
_ABOVE = re.compile(r"高于|超过|大于|高出|多于|(?<![a-z0-9_.\-])(?:above|higher than|more than|exceed(?:s|ed)?)(?![a-z0-9_.\-])")
_BELOW = re.compile(r"低于|小于|少于|(?<![a-z0-9_.\-])(?:below|lower than|less than)(?![a-z0-9_.\-])")
_LOG_LEVELS = ("fatal", "critical", "error", "warn", "warning", "exception")
_LOG_WORDS = re.compile(r"日志|log|报错|异常|exception|error|warn")
_CHANGE_WORDS = re.compile(r"变更|发布|部署|上线|deploy|release|change")
# The units `shared.core.evidence_facts` writes, as the claim features' unit classes; any other unit
# is compared as a bare number.
_UNIT_CLASS = {"%": "percent", "ms": "time", "s": "time", "MB": "size", "/s": "rate", "count": "count", "": "bare"}
_UNIT_FACTOR = {"s": 1000.0}
MARKED_CHANGE = 1.5
MANY = 10
FEW = 5
_DETAIL_CHARS = 200


@dataclass(frozen=True)
class CitedRef:
    """One cited ref: its system-side text and what it states."""

    text: str
    tool_name: str = ""
    # None: a text without typed facts (its numbers count as stated); kind "unknown": text that
    # may only ground names, never values.
    facts: RefFacts | None = None


@dataclass(frozen=True)
class Finding:
    check_id: str
    verification: str  # contradicted | external_unknown | unsupported | overstated
    detail: str
    fabricated_key: bool = False
    # key_term.absent: the absent term and its kind (identifier, version, person, ascii_word,
    # cjk_noun, event).
    term: str = ""
    term_kind: str = ""
    span: tuple[int, int] | None = None  # where in the normalised statement (key terms, values)


def worst(findings: Iterable[Finding]) -> Finding | None:
    """The finding with the lowest verification (a key fabrication first among equals)."""
    ranked = sorted(findings, key=lambda f: (VERIFICATION_RANK[f.verification], not f.fabricated_key))
    return ranked[0] if ranked else None


def _bounded(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


# --- reading the refs ---------------------------------------------------------------------------


@dataclass
class _Evidence:
    refs: list[CitedRef]
    text: str  # every ref's text and named subject/metric, normalised
    incident_text: str  # the same without knowledge lookups

    @property
    def facts(self) -> list[RefFacts]:
        return [ref.facts for ref in self.refs if ref.facts is not None]


# Every statement of a Draft section, side text or claim reads the same cited refs joined: their
# normal form is kept per joined text.
_evidence_normal = per_text_cache(256, 20_000)(normalise)


def _evidence(refs: list[CitedRef]) -> _Evidence:
    parts, incident = [], []
    for ref in refs:
        piece = ref.text
        if ref.facts is not None:
            piece = "\n".join(p for p in (ref.text, ref.facts.subject, ref.facts.metric, ref.facts.filter) if p)
        parts.append(piece)
        if ref.tool_name != LOOKUP_KNOWLEDGE and (ref.facts is None or ref.facts.kind != "knowledge"):
            incident.append(piece)
    return _Evidence(refs, _evidence_normal("\n".join(parts)), _evidence_normal("\n".join(incident)))


def _as_quantity(value: StatedValue) -> Quantity:
    unit_class = _UNIT_CLASS.get(value.unit, "bare")
    scaled = value.value * _UNIT_FACTOR.get(value.unit, 1.0)
    return Quantity(scaled, unit_class, "ms" if unit_class == "time" else value.unit.lower(), 6, str(value.value))


def _metric_families(metric: str) -> set[str]:
    return extract(re.sub(r"[_:.]+", " ", metric)).families


# --- the statement's pieces ---------------------------------------------------------------------


_QUOTED = re.compile(r"「[^」]*」|“[^”]*”|\"[^\"]*\"|『[^』]*』")


def _unquoted(text: str) -> str:
    """`text` with quoted evidence (「…」, “…”) blanked, same length: a quoted log line's words
    (`No space left`, `overflow=0`) are what the evidence says, not what the statement asserts."""
    return _QUOTED.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], text)


@dataclass
class _Statement:
    text: str  # normalised
    times: list[NamedTime]
    subjects: set[str]  # subjects of the cited refs that the statement names
    metrics: set[str]  # metric names of the cited refs that the statement names
    families: set[str]  # metric families the statement names

    @cached_property
    def asserted(self) -> str:
        """The text without its quotations: what polarity, vagueness and causes are read from
        (read by every check: blanked once; `text` is never reassigned)."""
        return _unquoted(self.text)

    @cached_property
    def _breaks(self) -> list[tuple[int, int]]:
        """Where the clause breaks stand (every check asks for clauses: the text is scanned once)."""
        return [match.span() for match in _CLAUSE_BREAK.finditer(self.text)]

    def clause(self, span: tuple[int, int]) -> tuple[int, int]:
        start = 0
        for break_start, break_end in self._breaks:
            if break_start >= span[1]:
                return start, break_start
            if break_end <= span[0]:
                start = break_end
        return start, len(self.text)

    def clause_times(self, span: tuple[int, int]) -> list[NamedTime]:
        lo, hi = self.clause(span)
        return [t for t in self.times if lo <= t.span[0] < hi]

    def clause_metrics(self, span: tuple[int, int]) -> tuple[set[str], set[str]]:
        lo, hi = self.clause(span)
        piece = self.text[lo:hi]
        metrics = {m for m in self.metrics if m in piece}
        families = extract(piece).families
        if metrics or families:
            return metrics, families
        return self.metrics, self.families


def clause_of(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """The clause of the normalised `text` that `span` stands in (between ，；。 and the like)."""
    return _Statement(text, [], set(), set(), set()).clause(span)


def _statement(text: str, evidence: _Evidence) -> _Statement:
    normal = normalise(text)
    # Many refs share a subject: each distinct subject is looked for once.
    subjects = {s for s in {f.subject.casefold() for f in evidence.facts if f.subject} if entity_present(s, normal)}
    metrics = {f.metric.casefold() for f in evidence.facts if f.metric and f.metric.casefold() in normal}
    return _Statement(normal, named_times(normal), subjects, metrics, extract(normal).families)


def _subject_ok(facts: RefFacts, statement: _Statement) -> bool:
    return not statement.subjects or facts.subject.casefold() in statement.subjects


def _metric_ok(facts: RefFacts, metrics: set[str], families: set[str]) -> bool:
    if not facts.metric:
        return False
    return facts.metric.casefold() in metrics or bool(_metric_families(facts.metric) & families)


def _instants(facts: RefFacts, value: StatedValue) -> list[str]:
    instants = [value.at or facts.at]
    if facts.kind == "metric_summary" and not value.at:
        instants += [facts.window_start, facts.window_end]
    return [i for i in instants if i]


def _time_ok(times: list[NamedTime], facts: RefFacts, value: StatedValue) -> bool:
    if not times:
        return True
    instants = _instants(facts, value)
    return any(t.matches(i) for t in times for i in instants)


# --- the checks ---------------------------------------------------------------------------------


def _key_term_findings(text: str, evidence: _Evidence, claim_type: str, causal_spans: list[tuple[int, int]]) -> list[Finding]:
    findings: list[Finding] = []
    normal = normalise(text)
    for term in key_terms(normal):
        if term_present(term, evidence.text):
            continue
        in_cause = claim_type == "root_cause" or any(lo <= term.span[0] < hi for lo, hi in causal_spans)
        key = term.kind != "cjk_noun" or in_cause
        findings.append(Finding(
            check_ids.KEY_TERM_ABSENT, "external_unknown",
            _bounded(f"{term.kind} {term.text!r} does not occur in the cited evidence"), fabricated_key=key,
            term=term.text, term_kind=term.kind, span=term.span,
        ))
    return findings


def _metric_values(evidence: _Evidence, statement: _Statement, span: tuple[int, int]) -> list[tuple[RefFacts, StatedValue]]:
    """Values of cited metric refs about the statement's subject and the clause's metric."""
    metrics, families = statement.clause_metrics(span)
    return [
        (facts, value)
        for facts in evidence.facts
        if facts.values and _subject_ok(facts, statement) and _metric_ok(facts, metrics, families)
        for value in facts.values
    ]


def _text_quantities(evidence: _Evidence, statement: _Statement) -> list[Quantity]:
    """Quantities in the texts of cited refs that are not metric values (log lines, changes,
    knowledge), and the item counts of scope refs."""
    found: list[Quantity] = []
    for ref in evidence.refs:
        facts = ref.facts
        if facts is not None and (facts.kind == "unknown" or not _subject_ok(facts, statement)):
            continue  # `unknown`: text whose refs' values cannot be told apart (names only)
        if facts is None or not facts.values:
            found += extract(ref.text).quantities
        if facts is not None and (facts.kind.endswith("_scope") or facts.kind == "metric_summary"):
            found.append(Quantity(float(facts.item_count), "count", "", 0, str(facts.item_count)))
    return found


_WINDOW_WORDS = re.compile(r"(?:最近|过去|近|前|(?<![a-z])(?:last|past)(?![a-z]))\s*$")


def _window_lengths(evidence: _Evidence) -> list[float]:
    """The lengths (ms) of the windows the cited refs cover."""
    lengths = []
    for facts in evidence.facts:
        start, end = parse_iso(facts.window_start), parse_iso(facts.window_end)
        if start is not None and end is not None:
            lengths.append((end - start).total_seconds() * 1000)
    return lengths


_WINDOW_START = re.compile(r"^(?:最近|过去|近|前|(?:last|past)(?![a-z]))")


def _is_window(statement: _Statement, span: tuple[int, int]) -> bool:
    """最近一小时, 过去 30 分钟: the query's window, not a measured value."""
    return bool(_WINDOW_WORDS.search(statement.text[max(0, span[0] - 6):span[0]])
                or _WINDOW_START.match(statement.text[span[0]:span[1]]))


def _window_covered(value_ms: float, evidence: _Evidence) -> bool:
    return any(abs(length - value_ms) <= 60_000 for length in _window_lengths(evidence))


def _value_findings(statement: _Statement, evidence: _Evidence) -> list[Finding]:
    findings: list[Finding] = []
    features = extract(statement.text)
    text_quantities = _text_quantities(evidence, statement)
    for quantity in features.quantities:
        if quantity.unit_class == "time" and _is_window(statement, quantity.span):
            if not _window_covered(quantity.value, evidence):
                findings.append(Finding(check_ids.VALUE_BINDING, "unsupported", _bounded(
                    f"{quantity.raw}: no cited search covers a window of that length"), span=quantity.span))
            continue
        ok, rival = _bound(quantity, statement, evidence)
        if ok or any(quantity.matches(q) for q in text_quantities):
            continue
        if rival is not None:
            findings.append(Finding(check_ids.VALUE_BINDING, "contradicted", _bounded(
                f"{quantity.raw}: the cited ref for {rival[0].subject} {rival[0].metric} at that time states "
                f"{rival[1].value:g}{rival[1].unit}"), span=quantity.span))
        else:
            findings.append(Finding(check_ids.VALUE_BINDING, "unsupported", _bounded(
                f"{quantity.raw}: no cited ref states this value for the same subject, metric and time"),
                span=quantity.span))
    for word in find_word_quantities(statement.text):
        if word.kind == "time" and _is_window(statement, word.span):
            if not _window_covered(word.value, evidence):
                findings.append(Finding(check_ids.VALUE_BINDING, "unsupported", _bounded(
                    f"{word.raw}: no cited search covers a window of that length"), span=word.span))
            continue
        if not _word_bound(word, statement, evidence, text_quantities):
            findings.append(Finding(check_ids.NUMBER_WORDS, "unsupported", _bounded(
                f"{word.raw}: no cited ref states this quantity for the same subject, metric and time"),
                span=word.span))
    for raw in find_unaccepted_quantities(statement.asserted):
        findings.append(Finding(check_ids.NUMBER_WORDS, "unsupported", _bounded(
            f"{raw}: a quantity in words outside the closed list is not accepted")))
    return findings


def _bound(quantity: Quantity, statement: _Statement, evidence: _Evidence) -> tuple[bool, tuple[RefFacts, StatedValue] | None]:
    """(some cited ref states the quantity for its subject/metric/time, a rival value for that slot)."""
    times = statement.clause_times(quantity.span)
    rival = None
    for facts, value in _metric_values(evidence, statement, quantity.span):
        stated = _as_quantity(value)
        same_class = stated.unit_class == quantity.unit_class or "bare" in (stated.unit_class, quantity.unit_class)
        if not _time_ok(times, facts, value):
            continue
        if quantity.matches(stated):
            return True, None
        if times and same_class and value.name == "value":
            rival = (facts, value)
    return False, rival


def _word_bound(word: WordQuantity, statement: _Statement, evidence: _Evidence, text_quantities: list[Quantity]) -> bool:
    times = statement.clause_times(word.span)
    values = [(f, v) for f, v in _metric_values(evidence, statement, word.span) if _time_ok(times, f, v)]
    if word.kind == "ratio":
        numbers = sorted({v.value for _, v in values if v.value > 0})
        return any(word.admits(b / a) for a in numbers for b in numbers if b > a)
    for _, value in values:
        stated = _as_quantity(value)
        if stated.unit_class == word.kind and word.admits(stated.value):
            return True
    return any(q.unit_class == word.kind and word.admits(q.value) for q in text_quantities)


def _summaries(evidence: _Evidence, statement: _Statement, span: tuple[int, int]) -> list[RefFacts]:
    metrics, families = statement.clause_metrics(span)
    return [
        f for f in evidence.facts
        if f.kind == "metric_summary" and _subject_ok(f, statement) and _metric_ok(f, metrics, families)
    ]


def _stat(facts: RefFacts, name: str) -> StatedValue | None:
    return next((v for v in facts.values if v.name == name), None)


@dataclass(frozen=True)
class _Asserted:
    """A value the statement asserts, in digits or in words, as the comparisons read it."""

    raw: str
    span: tuple[int, int]
    unit_class: str
    value: float  # in the unit class's base unit
    check_id: str  # value.comparison for digits, number.words for words
    quantity: Quantity | None = None
    word: WordQuantity | None = None

    def matches(self, stated: StatedValue) -> bool:
        as_quantity = _as_quantity(stated)
        if self.quantity is not None:
            return self.quantity.matches(as_quantity)
        assert self.word is not None
        return as_quantity.unit_class == self.unit_class and self.word.admits(as_quantity.value)


def _comparable(value: _Asserted, stated: StatedValue) -> bool:
    """Whether a stated value is in a unit the asserted value can be compared with."""
    unit_class = _as_quantity(stated).unit_class
    return unit_class == value.unit_class or {unit_class, value.unit_class} <= {"bare", "count"}


def _asserted(statement: _Statement) -> list[_Asserted]:
    values = [_Asserted(q.raw, q.span, q.unit_class, q.value, check_ids.VALUE_COMPARISON, quantity=q)
              for q in extract(statement.text).quantities]
    values += [_Asserted(w.raw, w.span, w.kind, w.value, check_ids.NUMBER_WORDS, word=w)
               for w in find_word_quantities(statement.text) if w.kind != "ratio"]
    return sorted(values, key=lambda a: a.span)


def _comparison_findings(statement: _Statement, evidence: _Evidence) -> list[Finding]:
    findings: list[Finding] = []
    asserted = _asserted(statement)
    for value in asserted:
        lo, hi = statement.clause(value.span)
        before = statement.asserted[lo:value.span[0]] + value.raw
        summaries = _summaries(evidence, statement, value.span)
        for pattern, stat, word in ((_MAX_WORDS, "max", "maximum"), (_MIN_WORDS, "min", "minimum"),
                                    (_MEDIAN_WORDS, "median", "median")):
            if not pattern.search(before):
                continue
            stated = [v for s in summaries if (v := _stat(s, stat)) is not None and _comparable(value, v)]
            if any(value.matches(v) for v in stated):
                continue
            shown = ", ".join(f"{v.value:g}{v.unit}" for v in stated)
            findings.append(Finding(
                value.check_id, "contradicted" if shown else "unsupported",
                _bounded(f"{value.raw} as the {word}: " + (f"the cited summary states {shown}" if shown
                                                             else "no cited summary states it")),
            ))
        if _LOW_WORDS.search(before):
            medians = [_as_quantity(m) for s in summaries if (m := _stat(s, "median")) is not None]
            medians = [m for m in medians if m.unit_class == value.unit_class]
            if not medians:
                findings.append(Finding(value.check_id, "unsupported", _bounded(
                    f"{value.raw} called low: no cited summary of that series states it")))
            elif all(m.value < value.value for m in medians):
                findings.append(Finding(value.check_id, "contradicted", _bounded(
                    f"{value.raw} called low, above the series' median")))
    comparisons: tuple[tuple[re.Pattern[str], Callable[[float, float], bool], str], ...] = (
        (_ABOVE, lambda a, b: a > b, "above"), (_BELOW, lambda a, b: a < b, "below"))
    for pattern, holds, word in comparisons:
        for match in pattern.finditer(statement.asserted):
            left = [q for q in asserted if q.span[1] <= match.start()]
            right = [q for q in asserted if q.span[0] >= match.end()]
            if not left or not right:
                continue
            b = right[0]
            same = [q for q in left if q.unit_class == b.unit_class]
            if same and not holds(same[-1].value, b.value):
                findings.append(Finding(check_ids.VALUE_COMPARISON, "contradicted", _bounded(
                    f"{same[-1].raw} is said to be {word} {b.raw}")))
    return findings


def _observations(evidence: _Evidence, statement: _Statement) -> int:
    """How many observations the cited refs show: distinct log lines and changes, or a count."""
    items = {(f.kind, f.at) for f in evidence.facts if f.kind in ("log_line", "change") and _subject_ok(f, statement)}
    counts = [f.item_count for f in evidence.facts if f.kind.endswith("_scope") and _subject_ok(f, statement)]
    return max([len(items), *counts])


def _marked_change(evidence: _Evidence, statement: _Statement, span: tuple[int, int]) -> bool:
    for summary in _summaries(evidence, statement, span):
        low, mid, high = (_stat(summary, name) for name in ("min", "median", "max"))
        if mid is not None and mid.value > 0 and (
            (high is not None and high.value >= MARKED_CHANGE * mid.value)
            or (low is not None and low.value * MARKED_CHANGE <= mid.value)
        ):
            return True
    values = sorted(v.value for _, v in _metric_values(evidence, statement, span) if v.name == "value" and v.value > 0)
    return len(values) >= 2 and values[-1] >= MARKED_CHANGE * values[0]


def _vague_findings(statement: _Statement, evidence: _Evidence, negated: list[tuple[int, int]]) -> list[Finding]:
    findings: list[Finding] = []
    for word, rule, span in find_vague(statement.asserted):
        if any(lo <= span[0] < hi for lo, hi in negated):
            continue  # 未见明显升高: the negation is what is checked
        count = _observations(evidence, statement)
        ok = {
            "repeated": lambda: count >= 2,  # noqa: B023 - the lambdas are called in this iteration
            "many": lambda: count >= MANY,  # noqa: B023
            "few": lambda: 0 < count <= FEW,  # noqa: B023
            "marked_change": lambda: _marked_change(evidence, statement, span),  # noqa: B023
        }.get(rule, lambda: False)()
        if not ok:
            findings.append(Finding(check_ids.NUMBER_VAGUE, "unsupported", _bounded(
                f"{word} ({rule}): the cited evidence shows {count} observation(s)" if rule != "marked_change"
                else f"{word}: no cited series changes by {MARKED_CHANGE}x")))
    return findings


def _bad_lines(evidence: _Evidence, statement: _Statement, levels: set[str] | None = None) -> list[RefFacts]:
    return [
        f for f in evidence.facts
        if f.kind == "log_line" and _subject_ok(f, statement)
        and (f.level.upper() in (levels or BAD_LEVELS))
    ]


_IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def _levels_named(text: str) -> set[str]:
    # A metric name (an identifier such as http_5xx_error_rate) names no log level.
    text = _IDENTIFIER.sub(" ", text)
    named = {level.upper() for level in _LOG_LEVELS if re.search(rf"(?<![a-z]){level}(?![a-z])", text)}
    if "WARNING" in named:
        named.add("WARN")
    if re.search(r"错误|报错", text):
        named.add("ERROR")
    if re.search(r"告警|警告", text):
        named.add("WARN")
    return named


def _scope_levels(level_filter: str) -> set[str]:
    """The levels a log search covered (`ERROR,WARN`), WARNING read as WARN."""
    levels = {part.strip().upper() for part in level_filter.split(",") if part.strip()}
    return levels | ({"WARN"} if "WARNING" in levels else set())


def _empty_scopes(evidence: _Evidence, statement: _Statement, kind: str) -> list[RefFacts]:
    return [f for f in evidence.facts if f.kind == kind and f.empty and _subject_ok(f, statement)]


# The health answer's fixed opening (shared.core.direct_answer.NOTHING_FOUND) and the scope after it.
_NOTHING_FOUND = re.compile(r"在所查范围内未发现异常(?:[（(][^（）()]*[）)])?")
_ANOMALY_LEVELS = frozenset({"FATAL", "CRITICAL", "ERROR"})


def _nothing_found_findings(statement: _Statement, evidence: _Evidence) -> list[Finding]:
    """「在所查范围内未发现异常（<scope>）」 denies anomalies, not every log line: it is supported
    when what it cites was read (a metric summary, or a search that found nothing) and shows no
    ERROR/FATAL line of the subject. The scope in brackets names what was checked and is no
    negation. WARN lines (routine noise) may be cited beside it; whether any cited Analysis shows
    an anomaly is the single-ReAct answer guard's check (`gateway/answer_guard.py`)."""
    errors = _bad_lines(evidence, statement, set(_ANOMALY_LEVELS))
    if errors:
        return [Finding(check_ids.POLARITY_NEGATION, "contradicted", _bounded(
            f"says no anomaly was found but cites a {errors[0].level} line at {errors[0].at}"))]
    read = [f for f in evidence.facts if _subject_ok(f, statement)
            and (f.kind == "metric_summary" or (f.kind.endswith("_scope") and f.empty))]
    if not read:
        return [Finding(check_ids.POLARITY_NEGATION, "unsupported",
                        "says no anomaly was found without a cited summary or empty search")]
    return []


def _negation_findings(statement: _Statement, evidence: _Evidence, exclusion_spans: list[tuple[int, int]]) -> list[Finding]:
    findings: list[Finding] = []
    opening = [m.span() for m in _NOTHING_FOUND.finditer(statement.asserted)]
    if opening:
        findings += _nothing_found_findings(statement, evidence)
    for negation in find_negations(statement.asserted):
        if any(lo <= negation.span[0] < hi for lo, hi in exclusion_spans + opening):
            continue
        lo, hi = statement.clause(negation.span)
        scope_text = statement.asserted[lo:hi]
        levels = _levels_named(scope_text)
        if levels or (_LOG_WORDS.search(scope_text) and not statement.clause_metrics(negation.span)[1]):
            contradicting = _bad_lines(evidence, statement, levels or None)
            if contradicting:
                findings.append(Finding(check_ids.POLARITY_NEGATION, "contradicted", _bounded(
                    f"denies {'/'.join(sorted(levels)) or 'log findings'} but cites such a line at {contradicting[0].at}")))
                continue
            scopes = [
                f for f in _empty_scopes(evidence, statement, "log_scope")
                if not f.level or not levels or levels <= _scope_levels(f.level)
            ]
            if not scopes:
                findings.append(Finding(check_ids.POLARITY_NEGATION, "unsupported", _bounded(
                    "states an absence of log findings without a cited search over that scope that found nothing")))
            continue
        if _CHANGE_WORDS.search(scope_text):
            if not _empty_scopes(evidence, statement, "change_scope"):
                findings.append(Finding(check_ids.POLARITY_NEGATION, "unsupported",
                                        "states an absence of changes without a cited search that found none"))
            continue
        metrics, families = statement.clause_metrics(negation.span)
        covered = [
            f for f in evidence.facts
            if f.kind in ("metric_summary", "metric_scope") and _subject_ok(f, statement)
            and (f.kind == "metric_scope" or not (metrics or families) or _metric_ok(f, metrics, families))
        ]
        if not covered and not any(f.empty and _subject_ok(f, statement) for f in evidence.facts):
            findings.append(Finding(check_ids.POLARITY_NEGATION, "unsupported", _bounded(
                "states absence or health without a cited summary or empty search over that scope")))
    return findings


def _absolute_findings(statement: _Statement, evidence: _Evidence) -> list[Finding]:
    findings: list[Finding] = []
    quantities = extract(statement.text).quantities
    for absolute in find_absolutes(statement.asserted):
        lo, hi = statement.clause(absolute.span)
        bounds = [q for q in quantities if lo <= q.span[0] < hi]
        bad = _bad_lines(evidence, statement)
        if bad:
            findings.append(Finding(check_ids.POLARITY_ABSOLUTE, "contradicted", _bounded(
                f"a universal statement, but the cited evidence has a {bad[0].level} line at {bad[0].at}")))
            continue
        if not bounds:
            if not any(f.kind in ("metric_summary", "metric_scope") or f.empty for f in evidence.facts):
                findings.append(Finding(check_ids.POLARITY_ABSOLUTE, "unsupported",
                                        "a universal statement without a cited summary over its scope"))
            continue
        bound = bounds[0]
        beyond: list[StatedValue | Quantity] = [
            v for f, v in _metric_values(evidence, statement, bound.span)
            if _as_quantity(v).unit_class == bound.unit_class and _as_quantity(v).value > bound.value
        ]
        beyond += [q for q in _text_quantities(evidence, statement)
                   if q.unit_class == bound.unit_class and q.value >= bound.value and q.unit_class != "count"]
        if beyond:
            findings.append(Finding(check_ids.POLARITY_ABSOLUTE, "contradicted", _bounded(
                f"everything within {bound.raw}, but the cited evidence shows a value at or beyond it")))
            continue
        maxima = [m for s in _summaries(evidence, statement, bound.span) if (m := _stat(s, "max")) is not None]
        if not any(_as_quantity(m).value <= bound.value for m in maxima):
            findings.append(Finding(check_ids.POLARITY_ABSOLUTE, "unsupported", _bounded(
                f"everything within {bound.raw}: no cited summary over the scope states its maximum")))
    return findings


def check_statement(
    text: str,
    refs: list[CitedRef],
    *,
    claim_type: str = "observation",
    check_causes: bool = False,
) -> list[Finding]:
    """Every grounding finding for one statement against its cited refs (empty: nothing found).

    `check_causes`: also report an unhedged cause the incident evidence does not state (for
    Draft sections and side texts; a claim's causal judgement is the verifier's own)."""
    if not text.strip():
        return []
    evidence = _evidence(refs)
    statement = _statement(text, evidence)
    exclusions = find_exclusions(statement.asserted)
    exclusion_spans = [e.span for e in exclusions]
    causal_spans = [span for span in find_causal(statement.asserted)
                    if not any(lo <= span[0] < hi for lo, hi in exclusion_spans)]
    cause_clauses = [statement.clause(span) for span in causal_spans]
    findings = _key_term_findings(statement.text, evidence, claim_type, cause_clauses)
    findings += _value_findings(statement, evidence)
    findings += _comparison_findings(statement, evidence)
    negations = find_negations(statement.asserted)
    findings += _vague_findings(statement, evidence, [statement.clause(n.span) for n in negations])
    findings += [
        Finding(check_ids.POLARITY_EXCLUSION, "unsupported", _bounded(
            f"excludes a candidate cause ({exclusion.candidate}): never a confirmed observation"))
        for exclusion in exclusions
    ]
    findings += _absolute_findings(statement, evidence)
    findings += _negation_findings(statement, evidence, exclusion_spans)
    if check_causes and causal_spans and not is_hedged(statement.asserted) and not extract(evidence.incident_text).causal:
        findings.append(Finding(check_ids.CAUSAL_UNHEDGED, "unsupported",
                                "asserts a cause without a hedge that the incident evidence does not state"))
    return findings
