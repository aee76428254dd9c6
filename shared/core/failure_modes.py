"""Kinds of failure, as data (`failure_modes.json`): what each is called, what it looks like.

A mechanism (`memory_oom`, `connection_pool_exhaustion`, …) is generic knowledge about a kind of
fault, never about a particular service. For each one the catalogue lists:

- what a question calls it (`aliases_zh`, `aliases_en`, `question_patterns`) and which thing it is
  about (`entity`); `variants` name narrower things the same mechanism can hit (a Redis or an HTTP
  client pool beside the default database connection pool), each with its own question words;
- the metric names that measure it (`signals.metric`: name tokens, the bad direction, and when the
  resource is at its limit), the log lines that report it (`signals.log`: regexes over one line),
  and the changes that can set it off (`signals.change`: change kinds, regexes over the summary);
- read-only next steps (`next_steps_zh`), and the steps that change the system (`remedies_zh`),
  which always need a human.

Most specific wins. When two matches in one text overlap and name different things, the shorter
is dropped (「Redis 连接池」 names a Redis pool, not the bare 「连接池」 it holds; 「下游挂了」 is a
dependency that is down, not a crash of this process; a Hikari "connection is not available,
request timed out" line is pool exhaustion, not a slow dependency); within one mechanism a
variant's match beats an overlapping match of the default entity. A metric gives each mechanism
once, through its signal whose tokens cover most of the name.

Operators extend the shipped file with ATTEST_FAILURE_MODES_FILE (`shared.config`): the same
shape; a mechanism with the same id is replaced whole, new ids are added. A file that cannot be
read, does not have that shape, or holds a regex that does not compile stops the process at
start-up (`FailureModesError`, raised while the settings are validated).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from shared.core.data_files import read_model_file
from shared.core.signal_semantics import Direction, name_tokens

SHIPPED_FILE = Path(__file__).with_name("failure_modes.json")

_ID = r"^[a-z][a-z0-9_]*$"
_TOKEN = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
_FIELD = re.compile(r"[a-z][a-z0-9_]*")
# A next step only reads; a step naming one of these changes the system and belongs in remedies_zh.
_SYSTEM_CHANGES = re.compile(r"重启|回滚|扩容|缩容|删除|杀掉|\b(?:restart|roll ?back|delete|kill|scale)\w*", re.IGNORECASE)
_PERCENT_UNITS = frozenset({"percent", "%", "pct", "percentage"})
_RATIO_UNITS = frozenset({"ratio", "fraction"})

LimitUnit = Literal["percent", "value"]


class FailureModesError(ValueError):
    """A failure-mode catalogue that cannot be read or does not have the expected shape."""


def _compiled(pattern: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from exc


def _regex(pattern: str) -> str:
    if not pattern.strip():
        raise ValueError("a pattern is empty")
    _compiled(pattern, re.IGNORECASE)
    return pattern


# A regular expression, checked to compile when the file is read.
Regex = Annotated[str, AfterValidator(_regex)]


class MetricSignal(BaseModel):
    """A metric name that measures the mechanism: every entry of `tokens` names one token (or
    phrase of tokens joined by `_`) the name must hold, alternatives separated by `|`; no token of
    `not_tokens` may occur. `at_limit`: the resource is at its limit when the value reaches it
    (>= when `bad` is up, <= when down); "max" means the resource's own maximum, given by the caller.
    `limit_unit` percent: the number is a percentage and a ratio series is scaled to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: tuple[str, ...] = Field(min_length=1)
    not_tokens: tuple[str, ...] = ()
    # The name is nothing but these tokens (`up`, never `scale_up_events`).
    whole_name: bool = False
    bad: Direction
    at_limit: float | Literal["max"] | None = None
    limit_unit: LimitUnit = "value"
    # The thing measured when it is narrower than the mechanism's entity (a Redis pool).
    entity: str | None = Field(default=None, pattern=_ID)

    @field_validator("tokens", "not_tokens")
    @classmethod
    def _token_shape(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        groups = tuple(group.strip().lower() for group in value)
        for group in groups:
            for token in group.split("|"):
                if not _TOKEN.fullmatch(token):
                    raise ValueError(f"{token!r} in {group!r} is not a name token "
                                     "(lower-case letters and digits, words joined by _, alternatives by |)")
        return groups

    def at_limit_reached(self, value: float, unit: str = "", limit: float | None = None) -> bool | None:
        """Whether `value` (in `unit`: percent, ratio, or anything else) is at the resource's limit;
        None when this signal has no limit or it cannot be told (no maximum given, a percentage
        limit against a series of unknown scale)."""
        if self.at_limit is None:
            return None
        if self.at_limit == "max":
            if limit is None:
                return None
            threshold = limit
        else:
            threshold = self.at_limit
            if self.limit_unit == "percent":
                unit = unit.strip().lower()
                if unit in _RATIO_UNITS:
                    value *= 100.0
                elif unit not in _PERCENT_UNITS:
                    return None
        return value >= threshold if self.bad == "up" else value <= threshold


class LogPattern(BaseModel):
    """A log regex that names a narrower entity than its mechanism's (a Redis pool)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: Regex
    entity: str = Field(pattern=_ID)


# A log entry is a regex, or a regex with the entity it names; the tags are no step of the file.
LogEntry = Annotated[
    Annotated[Regex, Tag("Text")] | Annotated[LogPattern, Tag("Object")],
    Discriminator(lambda value: "Text" if isinstance(value, str) else "Object"),
]


class ChangeSignal(BaseModel):
    """Changes that can set the mechanism off: every change of one of `kinds`, and any change
    whose summary matches one of `patterns`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kinds: tuple[str, ...] = ()
    patterns: tuple[Regex, ...] = ()

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(kind.strip().lower() for kind in value if kind.strip())


class Signals(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: tuple[MetricSignal, ...] = ()
    log: tuple[LogEntry, ...] = ()
    change: ChangeSignal | None = None


class Variant(BaseModel):
    """A narrower thing the mechanism can hit, told apart by the question's words."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entity: str = Field(pattern=_ID)
    name_zh: str = Field(min_length=1)
    thing_zh: str = ""  # the thing itself (Redis 连接池), for 「是：<thing>有已核实的异常」
    aliases_zh: tuple[str, ...] = ()
    aliases_en: tuple[str, ...] = ()
    question_patterns: tuple[Regex, ...] = ()


class Mechanism(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_ID)
    name_zh: str = Field(min_length=1)
    thing_zh: str = ""  # the thing its entity is (数据库连接池), for 「是：<thing>有已核实的异常」
    aliases_zh: tuple[str, ...] = ()
    aliases_en: tuple[str, ...] = ()
    entity: str = Field(pattern=_ID)
    question_patterns: tuple[Regex, ...] = ()
    variants: tuple[Variant, ...] = ()
    signals: Signals = Signals()
    # A resource that can be used up (memory, disk, a pool, CPU).
    at_limit_resource: bool = False
    next_steps_zh: tuple[str, ...] = Field(min_length=2, max_length=6)
    remedies_zh: tuple[str, ...] = ()

    @field_validator("next_steps_zh")
    @classmethod
    def _read_only(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for step in value:
            found = _SYSTEM_CHANGES.search(step)
            if found:
                raise ValueError(f"next step {step!r} changes the system ({found.group(0)}): put it in remedies_zh")
        return value

    @model_validator(mode="after")
    def _known_entities(self) -> Mechanism:
        known = set(self.entities)
        named = [signal.entity for signal in self.signals.metric if signal.entity]
        named += [item.entity for item in self.signals.log if isinstance(item, LogPattern)]
        for entity in named:
            if entity not in known:
                raise ValueError(f"entity {entity!r} is neither the mechanism's entity nor one of its variants'")
        return self

    @property
    def entities(self) -> tuple[str, ...]:
        return (self.entity, *(variant.entity for variant in self.variants))


class CatalogueFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    about: str = ""
    mechanisms: tuple[Mechanism, ...]

    @model_validator(mode="after")
    def _unique_ids(self) -> CatalogueFile:
        seen: set[str] = set()
        for mechanism in self.mechanisms:
            if mechanism.id in seen:
                raise ValueError(f"mechanism id {mechanism.id!r} is listed twice")
            seen.add(mechanism.id)
        return self


# --- matches --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mention:
    """Where a text names a mechanism and which thing it names (`text`: the words, lower-cased)."""

    mechanism: Mechanism
    entity: str
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class MetricMatch:
    mechanism: Mechanism
    signal: MetricSignal
    metric: str

    @property
    def entity(self) -> str:
        return self.signal.entity or self.mechanism.entity

    def at_limit(self, value: float, unit: str = "", limit: float | None = None) -> bool | None:
        """`MetricSignal.at_limit_reached`, the unit read from the metric's name when not given
        (`…_ratio` is a ratio, `…_percent` a percentage)."""
        return self.signal.at_limit_reached(value, unit or unit_from_name(self.metric), limit)


def unit_from_name(metric: str) -> str:
    """`ratio` or `percent` when the name's last unit word says so, else ""."""
    for token in reversed(name_tokens(metric)):
        if token in _RATIO_UNITS:
            return "ratio"
        if token in _PERCENT_UNITS:
            return "percent"
    return ""


@dataclass(frozen=True)
class _Rule:
    """One compiled text pattern and what it names; every match holds one of `needs`."""

    pattern: re.Pattern[str]
    needs: tuple[str, ...]
    mechanism: Mechanism
    entity: str

    def mentions(self, lowered: str) -> Iterable[Mention]:
        return (
            Mention(self.mechanism, self.entity, match.group(0), match.start(), match.end())
            for match in self.pattern.finditer(lowered)
            if match.end() > match.start()
        )


@dataclass(frozen=True, eq=False)
class _RuleSet:
    """Rules searched only where one of their needed substrings occurs: each distinct substring is
    tested once per text, however many rules need it."""

    rules: tuple[_Rule, ...]
    _by_need: tuple[tuple[str, tuple[int, ...]], ...] = field(init=False, repr=False)
    _always: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_need: dict[str, list[int]] = {}
        always: list[int] = []
        for index, rule in enumerate(self.rules):
            for need in rule.needs:
                by_need.setdefault(need, []).append(index)
            if not rule.needs:
                always.append(index)
        object.__setattr__(self, "_by_need", tuple((need, tuple(rules)) for need, rules in by_need.items()))
        object.__setattr__(self, "_always", tuple(always))

    def mentions(self, lowered: str) -> list[Mention]:
        chosen = set(self._always)
        for need, indexes in self._by_need:
            if need in lowered:
                chosen.update(indexes)
        return [mention for index in sorted(chosen) for mention in self.rules[index].mentions(lowered)]


def _rule(pattern: str, mechanism: Mechanism, entity: str, flags: int = re.IGNORECASE) -> _Rule:
    return _Rule(_compiled(pattern, flags), _needs(pattern), mechanism, entity)


# A question mixes Chinese and English: `\w` and `\b` read as ASCII there, so that 「panic的问题吗」
# mentions `panic`, not the whole run of word characters after it.
_QUESTION_FLAGS = re.IGNORECASE | re.ASCII


# --- what every match of a pattern holds ----------------------------------------------------------
# A log reader runs every pattern over every line; most lines name no failure at all. A pattern is
# searched only in a line that holds one of its needed substrings (a substring test costs a small
# fraction of a regex scan). The reading below is conservative: where it is unsure it needs nothing.


def _needs(pattern: str) -> tuple[str, ...]:
    """Lower-cased substrings one of which every match of `pattern` holds; () when none is known."""
    found: list[str] = []
    for branch in _top_branches(pattern):
        need = _branch_needs(branch)
        if not need:
            return ()
        found += need
    return tuple(dict.fromkeys(found))


def _scan(pattern: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """(index, character, group depth after it) of each character of `pattern` from `start` that
    is neither escaped nor inside a character class."""
    depth, i = 0, start
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i) + 1
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        yield i, char, depth
        i += 1


def _top_branches(pattern: str) -> list[str]:
    branches: list[str] = []
    start = 0
    for i, char, depth in _scan(pattern):
        if char == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
    branches.append(pattern[start:])
    return branches


def _class_end(pattern: str, start: int) -> int:
    """The index of the `]` closing the class opened at `start` (the end of the pattern if none)."""
    i = start + 1
    if pattern[i:i + 1] == "^":
        i += 1
    if pattern[i:i + 1] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _group_end(pattern: str, start: int) -> int:
    return next((i for i, char, depth in _scan(pattern, start) if char == ")" and depth == 0), len(pattern))


def _quantifier_end(pattern: str, at: int) -> int:
    """The index after the quantifier starting at `at` (and its lazy or possessive mark)."""
    if pattern[at] == "{":
        close = pattern.find("}", at)
        at = close if close >= 0 else len(pattern) - 1
    at += 1
    return at + 1 if pattern[at:at + 1] in ("?", "+") else at


def _branch_needs(branch: str) -> tuple[str, ...]:
    candidates: list[tuple[str, ...]] = []
    run = ""
    i = 0
    while i < len(branch):
        char = branch[i]
        if char in "?*+{":
            # The quantified atom is the run's last character: optional (?*{) or not (+).
            kept = run if char == "+" else run[:-1]
            if kept:
                candidates.append((kept,))
            run = ""
            i = _quantifier_end(branch, i)
            continue
        if char == "\\":
            escaped = branch[i + 1:i + 2]
            if escaped in ("b", "B"):  # zero-width: the text around it is contiguous
                i += 2
                continue
            if escaped and not escaped.isalnum():
                run += escaped
                i += 2
                continue
            literal = ""  # a class (\d, \s, \w) or a reference
            i += 2
        elif char == "(":
            end = _group_end(branch, i)
            body = branch[i + 1:end]
            after = branch[end + 1:end + 2]
            if run:
                candidates.append((run,))
            run = ""
            optional = after in ("?", "*") or after == "{"
            if not optional and (body.startswith("?:") or not body.startswith("?")):
                inner = _needs(body[2:] if body.startswith("?:") else body)
                if inner:
                    candidates.append(inner)
            i = end + 1
            if after and after in "?*+{":
                i = _quantifier_end(branch, i)
            continue
        elif char in ".^$[":
            literal = ""
            i = _class_end(branch, i) + 1 if char == "[" else i + 1
        else:
            run += char
            i += 1
            continue
        if run:
            candidates.append((run,))
        run = literal
    if run:
        candidates.append((run,))
    if not candidates:
        return ()
    best = max(candidates, key=lambda need: min(len(text) for text in need))
    return tuple(text.lower() for text in best)


def _alias_pattern(alias: str) -> str:
    """An alias as a regex over the lower-cased question: spaces optional, an ASCII word whole."""
    words = [re.escape(word) for word in alias.lower().split()]
    body = r"\s*".join(words)
    if alias.isascii():
        return rf"(?<![a-z0-9_]){body}(?![a-z0-9_])"
    return body


def _most_specific(mentions: list[Mention]) -> list[Mention]:
    """The mentions left after dropping every one that a more specific overlapping mention beats
    (module docstring), in text order."""

    def beaten(small: Mention, big: Mention) -> bool:
        if small is big or small.end <= big.start or big.end <= small.start:
            return False
        if (big.mechanism.id, big.entity) == (small.mechanism.id, small.entity):
            return False
        if big.end - big.start > small.end - small.start:
            return True
        return (big.mechanism.id == small.mechanism.id and big.entity != big.mechanism.entity
                and small.entity == small.mechanism.entity)

    kept = [m for m in mentions if not any(beaten(m, other) for other in mentions)]
    return sorted(kept, key=lambda m: (m.start, -m.end))


def _first_each(mentions: list[Mention]) -> tuple[Mention, ...]:
    seen: set[tuple[str, str]] = set()
    out: list[Mention] = []
    for mention in mentions:
        key = (mention.mechanism.id, mention.entity)
        if key not in seen:
            seen.add(key)
            out.append(mention)
    return tuple(out)


@dataclass(frozen=True)
class _MetricRule:
    mechanism: Mechanism
    signal: MetricSignal
    groups: tuple[tuple[tuple[str, ...], ...], ...]
    excluded: tuple[tuple[str, ...], ...]

    def score(self, tokens: list[str]) -> int | None:
        """The number of name tokens this signal's groups cover, or None when it does not match."""
        if any(_phrase_at(tokens, phrase) >= 0 for phrase in self.excluded):
            return None
        covered: set[int] = set()
        for group in self.groups:
            hit = False
            for phrase in group:
                at = _phrase_at(tokens, phrase)
                if at >= 0:
                    covered.update(range(at, at + len(phrase)))
                    hit = True
            if not hit:
                return None
        if self.signal.whole_name and len(covered) != len(tokens):
            return None
        return len(covered) * 10 + len(self.groups)


def _phrase_at(tokens: list[str], phrase: tuple[str, ...]) -> int:
    size = len(phrase)
    for start in range(len(tokens) - size + 1):
        if tuple(tokens[start:start + size]) == phrase:
            return start
    return -1


def _phrases(groups: tuple[str, ...]) -> tuple[tuple[tuple[str, ...], ...], ...]:
    return tuple(tuple(tuple(token.split("_")) for token in group.split("|")) for group in groups)


@dataclass(frozen=True, eq=False)
class FailureModes:
    """The catalogue, compiled for matching."""

    mechanisms: tuple[Mechanism, ...]
    _by_id: Mapping[str, Mechanism] = field(init=False, repr=False)
    _question_rules: _RuleSet = field(init=False, repr=False)
    _log_rules: _RuleSet = field(init=False, repr=False)
    _metric_rules: tuple[_MetricRule, ...] = field(init=False, repr=False)
    _change_rules: tuple[tuple[Mechanism, frozenset[str], tuple[re.Pattern[str], ...]], ...] = field(
        init=False, repr=False)

    def __post_init__(self) -> None:
        questions: list[_Rule] = []
        logs: list[_Rule] = []
        metrics: list[_MetricRule] = []
        changes: list[tuple[Mechanism, frozenset[str], tuple[re.Pattern[str], ...]]] = []
        for mechanism in self.mechanisms:
            for alias in (*mechanism.aliases_zh, *mechanism.aliases_en):
                questions.append(_rule(_alias_pattern(alias), mechanism, mechanism.entity))
            questions += [_rule(pattern, mechanism, mechanism.entity, _QUESTION_FLAGS) for pattern in mechanism.question_patterns]
            for variant in mechanism.variants:
                for alias in (*variant.aliases_zh, *variant.aliases_en):
                    questions.append(_rule(_alias_pattern(alias), mechanism, variant.entity))
                questions += [_rule(pattern, mechanism, variant.entity, _QUESTION_FLAGS) for pattern in variant.question_patterns]
            for item in mechanism.signals.log:
                if isinstance(item, str):
                    logs.append(_rule(item, mechanism, mechanism.entity))
                else:
                    logs.append(_rule(item.pattern, mechanism, item.entity))
            for signal in mechanism.signals.metric:
                excluded = tuple(phrase for group in _phrases(signal.not_tokens) for phrase in group)
                metrics.append(_MetricRule(mechanism, signal, _phrases(signal.tokens), excluded))
            change = mechanism.signals.change
            if change is not None:
                patterns = tuple(_compiled(p, re.IGNORECASE) for p in change.patterns)
                changes.append((mechanism, frozenset(change.kinds), patterns))
        object.__setattr__(self, "_by_id", {mechanism.id: mechanism for mechanism in self.mechanisms})
        object.__setattr__(self, "_question_rules", _RuleSet(tuple(questions)))
        object.__setattr__(self, "_log_rules", _RuleSet(tuple(logs)))
        object.__setattr__(self, "_metric_rules", tuple(metrics))
        object.__setattr__(self, "_change_rules", tuple(changes))

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(mechanism.id for mechanism in self.mechanisms)

    def by_id(self, mechanism_id: str) -> Mechanism:
        """The mechanism with this id (KeyError when there is none)."""
        return self._by_id[mechanism_id]

    def action_listing(self) -> list[str]:
        """The catalogue's actions as a model may cite them (mechanism id, kind and index), one line
        per mechanism: `- bad_release 发布引入缺陷: next_step[0] …; remedy[0] …`."""
        lines = []
        for mechanism in self.mechanisms:
            steps = [f"next_step[{i}] {text}" for i, text in enumerate(mechanism.next_steps_zh)]
            steps += [f"remedy[{i}] {text}" for i, text in enumerate(mechanism.remedies_zh)]
            lines.append(f"- {mechanism.id} {mechanism.name_zh}: " + "; ".join(steps))
        return lines

    def entity_name(self, entity: str) -> str:
        """The Chinese name of a thing a mechanism is about (a variant's own: Redis 连接池; its
        failure's name when the catalogue gives no `thing_zh`), "" when no mechanism names it."""
        for mechanism in self.mechanisms:
            if mechanism.entity == entity:
                return mechanism.thing_zh or mechanism.name_zh
            for variant in mechanism.variants:
                if variant.entity == entity:
                    return variant.thing_zh or variant.name_zh
        return ""

    def entities_in(self, text: str, metrics: Iterable[str] = ()) -> dict[str, str]:
        """The things a finding is about, by the catalogue: each entity its words (`line_mentions`)
        or its metrics (`for_metric`, the best match) name, with the mechanism's Chinese name."""
        found: dict[str, str] = {}
        for mention in self.line_mentions(text):
            found.setdefault(mention.entity, mention.mechanism.name_zh)
        for metric in metrics:
            matches = self.for_metric(metric)
            if matches:
                found.setdefault(matches[0].entity, matches[0].mechanism.name_zh)
        return found

    def hypothesis_in(self, question: str) -> tuple[Mention, ...]:
        """The mechanisms (and the thing each is about) a question names, most specific first
        wins, in the order the question names them, each (mechanism, entity) once."""
        lowered = question.lower()
        return _first_each(_most_specific(self._question_rules.mentions(lowered)))

    def line_mentions(self, text: str) -> tuple[Mention, ...]:
        """What one log line reports, with the thing each match names."""
        lowered = text.lower()
        return _first_each(_most_specific(self._log_rules.mentions(lowered)))

    def for_line(self, text: str) -> tuple[Mechanism, ...]:
        """The mechanisms one log line names, in the order it names them."""
        seen: dict[str, Mechanism] = {}
        for mention in self.line_mentions(text):
            seen.setdefault(mention.mechanism.id, mention.mechanism)
        return tuple(seen.values())

    def for_metric(self, name: str) -> tuple[MetricMatch, ...]:
        """The mechanisms a metric name measures, each through its most specific signal, the best
        match first."""
        tokens = name_tokens(name)
        best: dict[str, tuple[int, int, _MetricRule]] = {}
        for order, rule in enumerate(self._metric_rules):
            score = rule.score(tokens)
            if score is None:
                continue
            kept = best.get(rule.mechanism.id)
            if kept is None or score > kept[0]:
                best[rule.mechanism.id] = (score, kept[1] if kept else order, rule)
        ranked = sorted(best.values(), key=lambda item: (-item[0], item[1]))
        return tuple(MetricMatch(rule.mechanism, rule.signal, name) for _, _, rule in ranked)

    def for_change(self, kind: str, summary: str) -> tuple[Mechanism, ...]:
        """The mechanisms a change of this kind and summary can set off, in catalogue order."""
        kind = kind.strip().lower()
        return tuple(
            mechanism for mechanism, kinds, patterns in self._change_rules
            if (kind and kind in kinds) or any(pattern.search(summary) for pattern in patterns)
        )

    def change_words(self, summary: str, mechanism_id: str) -> str:
        """The words of a change summary that one mechanism's change patterns match ("" when none)."""
        for mechanism, _, patterns in self._change_rules:
            if mechanism.id == mechanism_id:
                for pattern in patterns:
                    found = pattern.search(summary)
                    if found:
                        return found.group(0)
        return ""

    def merged(self, extra: CatalogueFile) -> FailureModes:
        """This catalogue with `extra` over it: same id replaced (in place), new ids appended."""
        replacing = {mechanism.id: mechanism for mechanism in extra.mechanisms}
        kept = [replacing.pop(mechanism.id, mechanism) for mechanism in self.mechanisms]
        return FailureModes((*kept, *(m for m in extra.mechanisms if m.id in replacing)))


def _read(path: Path) -> CatalogueFile:
    return read_model_file(path, CatalogueFile, FailureModesError, "failure-mode", _location)


def _location(raw: object, loc: tuple[int | str, ...]) -> str:
    """A validation error's path through the file, a mechanism named by its id
    (`mechanisms[disk_full].signals.log.2`); the union members pydantic names on the way (`str`,
    `LogPattern`) are no step of the file and are left out."""
    parts: list[str] = []
    node = raw
    for part in loc:
        if isinstance(node, list) and isinstance(part, int):
            item = node[part] if 0 <= part < len(node) else None
            name = item.get("id") if isinstance(item, dict) else None
            if parts == ["mechanisms"] and isinstance(name, str):
                parts[-1] = f"mechanisms[{name}]"
            else:
                parts.append(str(part))
            node = item
        elif isinstance(node, dict) and isinstance(part, str) and (part in node or _FIELD.fullmatch(part)):
            parts.append(part)
            node = node.get(part)
    return ".".join(parts) or "(top)"


@lru_cache(maxsize=8)
def load_failure_modes(path: str | None = None) -> FailureModes:
    """The shipped catalogue, with the operator's file at `path` merged over it when given."""
    shipped = FailureModes(_read(SHIPPED_FILE).mechanisms)
    if not path:
        return shipped
    return shipped.merged(_read(Path(path)))
