"""Which direction of a signal is bad: data (`signal_semantics.json`), not a suffix.

A metric name is split into lower-case tokens (at `_ : . -`, spaces and camelCase humps); each
token, or run of tokens joined by `_` (`response_time`), that a kind lists gives that kind. The
rightmost match decides: a name's last meaningful word is what it measures (`cache_hit_ratio` is
a hit ratio, `memory_free_bytes` free capacity, `up:targets_down` targets down). Whole metric
names are never listed; unit words (`bytes`, `seconds`, `total`, `ratio`, `percent`) are in no kind.
A name no kind matches keeps the old reading: higher is worse.

Operators extend the shipped file with ATTEST_SIGNAL_SEMANTICS_FILE (`shared.config`): the same
shape, merged over it. A kind of the same name is replaced; a token the operator lists is taken
from every shipped kind. A file that cannot be read or does not have that shape stops the process
at start-up (`SignalSemanticsError`, raised while the settings are validated).

The question can override a kind's direction (「命中率为什么降了」): `stated_directions` reads,
for each kind the question names by one of its `question_words`, the nearest rise or fall word
in the same clause.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.core.data_files import read_model_file

Direction = Literal["up", "down"]
SHIPPED_FILE = Path(__file__).with_name("signal_semantics.json")
UP: Direction = "up"
DOWN: Direction = "down"

_TOKEN_SPLIT = re.compile(r"[^0-9A-Za-z]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+[a-z]*")
_TOKEN = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")


class SignalSemanticsError(ValueError):
    """A signal semantics file that cannot be read or does not have the expected shape."""


class SignalKind(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bad: Direction
    tokens: tuple[str, ...] = Field(min_length=1)
    question_words: tuple[str, ...] = ()

    @field_validator("tokens")
    @classmethod
    def _token_shape(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        lowered = tuple(token.strip().lower() for token in value)
        for token in lowered:
            if not _TOKEN.fullmatch(token):
                raise ValueError(f"{token!r} is not a name token (lower-case letters and digits, words joined by _)")
        return lowered

    @field_validator("question_words")
    @classmethod
    def _words(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        words = tuple(word.strip().lower() for word in value)
        if any(not word for word in words):
            raise ValueError("a question word is empty")
        return words


class SemanticsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    about: str = ""
    kinds: dict[str, SignalKind]


@dataclass(frozen=True)
class SignalClass:
    kind: str
    bad: Direction


@dataclass(frozen=True, eq=False)
class SignalSemantics:
    kinds: Mapping[str, SignalKind]
    # Token (or phrase, as a tuple of tokens) -> kind; the first kind listing it keeps it.
    _table: dict[tuple[str, ...], str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        table: dict[tuple[str, ...], str] = {}
        for name, kind in self.kinds.items():
            for token in kind.tokens:
                table.setdefault(tuple(token.split("_")), name)
        object.__setattr__(self, "_table", table)

    def classify(self, metric: str) -> SignalClass | None:
        """The kind of the rightmost token (or phrase) of `metric` some kind lists, or None."""
        tokens = name_tokens(metric)
        table = self._table
        longest = max((len(key) for key in table), default=1)
        for end in range(len(tokens), 0, -1):
            # At each position the longest phrase ending there wins (`hit_ratio` over `ratio`).
            for size in range(min(longest, end), 0, -1):
                kind = table.get(tuple(tokens[end - size:end]))
                if kind is not None:
                    return SignalClass(kind, self.kinds[kind].bad)
        return None

    def bad_direction(self, metric: str) -> Direction:
        found = self.classify(metric)
        return found.bad if found is not None else UP

    def merged(self, extra: SemanticsFile) -> SignalSemantics:
        """This table with `extra` over it (see the module docstring)."""
        claimed = {token for kind in extra.kinds.values() for token in kind.tokens}
        kinds: dict[str, SignalKind] = {}
        for name, kind in self.kinds.items():
            if name in extra.kinds:
                continue
            left = tuple(token for token in kind.tokens if token not in claimed)
            if left:
                kinds[name] = kind.model_copy(update={"tokens": left})
        kinds.update(extra.kinds)
        return SignalSemantics(kinds)


def name_tokens(metric: str) -> list[str]:
    """`cacheHitRatio_percent` -> ['cache', 'hit', 'ratio', 'percent']."""
    tokens: list[str] = []
    for part in _TOKEN_SPLIT.split(metric):
        if part == part.lower():
            tokens += [part] if part else []
        else:
            tokens += [piece.lower() for piece in _CAMEL.findall(part)]
    return tokens


def _read(path: Path) -> SemanticsFile:
    return read_model_file(path, SemanticsFile, SignalSemanticsError, "signal semantics")


@lru_cache(maxsize=8)
def load_semantics(extra_file: str | None = None) -> SignalSemantics:
    """The shipped table, with `extra_file` (an operator's) merged over it when given."""
    shipped = SignalSemantics(_read(SHIPPED_FILE).kinds)
    if not extra_file:
        return shipped
    return shipped.merged(_read(Path(extra_file)))


# --- what the question says ---------------------------------------------------------------------

_CLAUSE = re.compile(r"[，。,;；？?！!\n]")
_FALL = re.compile(
    r"下降|降低|降了|骤降|暴跌|下跌|下滑|跌|减少|变少|变低|走低|掉|降(?!级)|少了|低了|"
    r"\b(?:drop(?:s|ped)?|fell|fall(?:s|ing)?|decreas\w*|declin\w*|lower)\b"
)
_RISE = re.compile(
    r"上升|升高|升了|飙升|暴涨|上涨|涨|增加|增长|变多|变高|走高|突增|激增|越来越高|越来越慢|升(?!级)|多了|高了|"
    r"\b(?:ris(?:e|es|ing)|rose|increas\w*|spik\w*|grow\w*|higher|jump\w*)\b"
)


def stated_directions(question: str, semantics: SignalSemantics) -> dict[str, Direction]:
    """Kind -> the direction the question says that signal moved, for the kinds it names with a
    rise or fall word nearby: the first such word after the signal's word in its clause, else the
    nearest one before it. A kind said to move both ways is left out."""
    text = question.lower()
    found: dict[str, set[Direction]] = {}
    for clause in _CLAUSE.split(text):
        moves = sorted(
            [(m.start(), UP) for m in _RISE.finditer(clause)] + [(m.start(), DOWN) for m in _FALL.finditer(clause)]
        )
        if not moves:
            continue
        for name, kind in semantics.kinds.items():
            for word in kind.question_words:
                at = _word_at(clause, word)
                if at < 0:
                    continue
                end = at + len(word)
                after = [direction for position, direction in moves if position >= end]
                before = [direction for position, direction in moves if position < at]
                if after:
                    found.setdefault(name, set()).add(after[0])
                elif before:
                    found.setdefault(name, set()).add(before[-1])
                break
    return {name: next(iter(directions)) for name, directions in found.items() if len(directions) == 1}


def _word_at(clause: str, word: str) -> int:
    """Where `word` occurs in `clause` (an ASCII word only as a whole word), or -1."""
    if word.isascii():
        match = re.search(rf"(?<![a-z0-9_]){re.escape(word)}(?![a-z0-9_])", clause)
        return match.start() if match else -1
    return clause.find(word)
