"""The causal link between a cause (a change or an event) and an anomaly, checked from texts and
times alone — the same rule for the embedded executor that proposes a `root_cause` claim and for
the verifier that judges any engine's (DESIGN §3, "Causal links").

A change is linked to an anomaly only when BOTH hold:
1. time: the change precedes the effect — the earliest cited onset of a metric anomaly or first
   occurrence of an error/warn signature — by at most `CHANGE_BEFORE_EFFECT_MIN` minutes (or
   falls in the effect's own minute, `CHANGE_AFTER_EFFECT_MIN`: onsets are known to the minute);
2. content: the change names a setting of the failure mode the catalogue reads in the
   anomaly's metric (`mechanism_link`: a TTL and a cache hit ratio); a new kind of error/warn line (`new_kind_after`: none of its kind in the read
   before it, which covers the time before the change) starts soon after the change and no later
   than the effect (within 30 min before it); or the change's text and a signature's text share a *distinctive identifier*: the same
   distinctive token; two identifiers one of which holds the other's words in order, at least
   `MIN_SHARED_PARTS` of them (`report.export.concurrency` and a thread `report-export-7`; the
   phrase `quote v2` and a flag `checkout.quote_v2`); or a run of at least `MIN_CJK_RUN` Chinese
   characters both write. Each must be rare in the run's evidence (below).
Closeness in time alone proves nothing: an unlinked change is a hypothesis at most.

A resource is linked to a symptom (`resource_link`) when a series measuring a limited resource
(the catalogue's `at_limit_resource` failure modes: a pool's connections in use, a thread pool,
memory, a disk) starts rising no later than the symptom's onset, and lines of the same service
that name that failure mode's exhaustion start with it or after it: the pool fills, waits time
out, requests slow down.

An event (an error/warn signature) is linked to a metric anomaly when the signature's first
occurrence comes at most `COINCIDE_MIN` minutes before the anomaly's onset and no later than the
onset's own minute (a cause never follows its effect) — or, when the line reports the very events
the series counts (`reports_series`: a `job … failed` line and a job failure count), anywhere
within `COINCIDE_MIN` of it: the line then says what those events are — for the same
service, or across services when the signature's text names the anomalous service (a log line
naming a dependency the run also checked). Coinciding onsets never link a change.

A token is distinctive by its *shape* and its *rarity in this run's evidence*, never by a list of
words:
- shape: a version (`v3.2.0`, `v5`, `1.9.4`), a dotted key or name (`cache.warmup.batch_size`), a
  `key=value` pair and its parts, an identifier with digits, underscores, inner hyphens or
  camelCase (`ruleSet`, `batch_size`, `db-01`, `shard7`), a path (`/srv/data/blobs`). Numbers,
  quantities (`3000ms`), timestamps, long hex ids and UUIDs are not tokens;
- rarity: the run's evidence texts are grouped by template (`shared/log_templates.py`: ids and
  numbers masked, then clustered by drain3's Drain, so the sixty points of a series or the lines
  of one log cluster are one group); a token is rare
  when it occurs in fewer groups than all and in at most `max(RARE_MIN_GROUPS, groups / 3)` of
  them, and is not the name of a service the evidence is about (the caller passes those). A
  service name occurs everywhere; a rule set named by one release and one log cluster does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

from shared.config import configured_failure_modes
from shared.core.contracts import VerifiedEvidence
from shared.core.grounding.claim_features import extract
from shared.core.log_levels import BAD_LEVELS
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE
from shared.log_templates import mask, templates
from shared.text_scan import per_text_cache

CHANGE_BEFORE_EFFECT_MIN = 120
CHANGE_AFTER_EFFECT_MIN = 1
COINCIDE_MIN = 5
# An onset is a minute's point: a line logged in the minute after it still belongs to the same move.
SIGNATURE_AFTER_ONSET_MIN = 2
# A resource that runs out: its lines may follow its onset by this much (they start when it is
# used up: a slow leak fills memory for many minutes), and it precedes the symptom's onset by at
# most this much.
RESOURCE_LINES_AFTER_MIN = 30
RESOURCE_BEFORE_EFFECT_MIN = 30
RARE_MIN_GROUPS = 3
RARE_SHARE = 1 / 3
# A change is also linked to a new kind of error/warn line (a release that brings a new
# exception) that starts at most this many minutes after it, in a read that covers at least
# NEW_KIND_QUIET_BEFORE_MIN minutes before the change without one.
NEW_KIND_AFTER_CHANGE_MIN = 15
# A change that names a setting of the anomaly's own failure mode (`mechanism_link`) is linked
# within this many minutes before its onset; the catalogue's modes that any change matches are not.
MECHANISM_BEFORE_ONSET_MIN = 60
GENERIC_MODES = frozenset({"config_change", "bad_release"})
NEW_KIND_QUIET_BEFORE_MIN = 10
NEW_KIND_BEFORE_ONSET_MIN = 30  # ... and starts at most this long before the onset it explains (a slow ramp's onset is read late)
MIN_SHARED_PARTS = 2  # words two identifiers must share, in order, to name one thing
MIN_CJK_RUN = 4  # characters of Chinese a change and a line must both write

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_RAW_TOKEN = re.compile(r"[A-Za-z0-9_./=\-]+")
_VERSION = re.compile(r"^(?:v\d+(?:\.\d+)*(?:[-+][a-z0-9.]+)?|\d+\.\d+\.\d+(?:\.\d+)*(?:[-+][a-z0-9.]+)?)$")
_QUANTITY = re.compile(r"^[+-]?\d+(?:\.\d+)?(?:[a-z%]{0,3}|/s)$")
_HEXISH = re.compile(r"^(?=.*\d)[0-9a-f\-]{8,}$")
_DOTTED = re.compile(r"^[a-z_][a-z0-9_\-]*(?:\.[a-z0-9_\-]+)+$")
_CAMEL = re.compile(r"[a-z][A-Z]")
_LETTER = re.compile(r"[a-z]")
_DIGIT_OR_UNDERSCORE = re.compile(r"[\d_]")
_INNER_HYPHEN = re.compile(r"[a-z]-[a-z0-9]")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PART_SEPARATORS = re.compile(r"[._\-/=:\s]+")
_KEY_VALUE = re.compile(r"=")
# Plain words side by side (`quote v2`, `SKU cache`): a phrase a change summary may name a thing by.
_PHRASE = re.compile(r"(?<![A-Za-z0-9_.\-=:/])[A-Za-z][A-Za-z0-9]*(?: [A-Za-z0-9][A-Za-z0-9]*)+(?![A-Za-z0-9_.\-=:/])")
_CJK_RUN = re.compile(rf"[\u4e00-\u9fff]{{{MIN_CJK_RUN},}}")
_EDGE = "._-=:"  # stripped from a token's ends (a path keeps its leading slash; a trailing one goes)
# A run's evidence repeats the same words (names, keys) and, across runs over one window, the same
# texts: each is read once. Ref texts are short (MAX_REF_TEXT_CHARS); a longer text is not kept.
_CACHED_TEXTS = 8192
_CACHED_TOKENS = 16384
_MAX_CACHED_TEXT_CHARS = 2000


def _shaped(token: str, original: str) -> bool:
    """Whether one (lower-cased) token has a distinctive shape; `original` keeps its case."""
    if len(token) < 2:
        return False
    lettered = _LETTER.search(token) is not None
    version = _VERSION.match(token) is not None
    if not lettered and not version:
        return False
    if _QUANTITY.match(token) or _HEXISH.match(token):
        return False
    if version:
        return True
    if "/" in token:
        return token.startswith("/") and token.count("/") >= 2 and lettered
    if _DOTTED.match(token):
        return True
    if _CAMEL.search(original):
        return True
    return lettered and (_DIGIT_OR_UNDERSCORE.search(token) is not None or _INNER_HYPHEN.search(token) is not None)


@lru_cache(maxsize=_CACHED_TOKENS)
def _shaped_word(original: str) -> bool:
    return _shaped(original.lower(), original)


@lru_cache(maxsize=_CACHED_TOKENS)
def _raw_token_shapes(raw: str) -> tuple[str, ...]:
    """The distinctive tokens one raw token (a `_RAW_TOKEN` match) contributes, lower-cased."""
    original = raw.strip(_EDGE).rstrip("/")
    if "=" not in original:
        return (original.lower(),) if original and _shaped_word(original) else ()
    key, _, value = original.partition("=")
    value = value.partition("=")[0]  # `reason=media.cleanup.enabled=false`: the inner key is the value
    key, value = key.strip(_EDGE), value.strip(_EDGE).rstrip("/")
    key_shaped = bool(key) and _shaped_word(key)
    value_shaped = bool(value) and _shaped_word(value)
    found: list[str] = []
    if key and value and (key_shaped or value_shaped):
        found.append(f"{key.lower()}={value.lower()}")
    if key_shaped:
        found.append(key.lower())
    if value_shaped:
        found.append(value.lower())
    return tuple(found)


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_TEXT_CHARS)
def _shapes_of(text: str) -> frozenset[str]:
    found: set[str] = set()
    for raw in set(_RAW_TOKEN.findall(_ISO.sub(" ", text))):
        found.update(_raw_token_shapes(raw))
    return frozenset(found)


def distinctive_shapes(text: str) -> set[str]:
    """The tokens of `text` whose shape is distinctive (lower-cased); see the module docstring."""
    return set(_shapes_of(text))


def template_of(text: str) -> str:
    """A text's template on its own (`shared.log_templates.mask`); a corpus groups its texts by
    their templates among each other (`shared.log_templates.templates`)."""
    return mask(text)


@dataclass
class Corpus:
    """This run's evidence texts, grouped by template, for rarity. The texts are grouped when a
    token's rarity is first asked, and a token's groups are found among the texts that hold it as
    a substring (every distinctive token does, lower-cased; a key=value pair's key and value do):
    a run's hundreds of texts are grouped, the few that can hold the token are read in full."""

    texts: list[str] = field(default_factory=list)
    excluded: set[str] = field(default_factory=set)  # service names (lower-cased)
    # template -> (text, lower-cased text) of each distinct text of the group; token -> its groups
    _grouped: dict[str, list[tuple[str, str]]] | None = field(default=None, init=False, repr=False, compare=False)
    _frequency: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    # Each group's lower-cased texts joined: a token's part absent from it is absent from every
    # text of the group, so only a group holding them all is read text by text.
    _joined: list[tuple[str, list[tuple[str, str]]]] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, texts: Iterable[str], excluded: Iterable[str] = ()) -> Corpus:
        return cls(texts=list(texts), excluded={name.lower() for name in excluded if name})

    def _groups(self) -> dict[str, list[tuple[str, str]]]:
        if self._grouped is None:
            self._grouped = {}
            distinct = list(dict.fromkeys(self.texts))
            # Texts that differ only in ASCII digits share a mask (`shared.log_templates.masks`):
            # the sixty points of a series are masked once and clustered as one.
            for text, template in zip(distinct, templates(distinct)):
                self._grouped.setdefault(template, []).append((text, text.lower()))
        return self._grouped

    @property
    def groups(self) -> dict[str, set[str]]:
        """template -> the distinctive tokens of its texts."""
        return {template: set().union(*(_shapes_of(text) for text, _ in members)) for template, members in self._groups().items()}

    def document_frequency(self, token: str) -> int:
        frequency = self._frequency.get(token)
        if frequency is None:
            if self._joined is None:
                self._joined = [("\n".join(lowered for _, lowered in members), members)
                                for members in self._groups().values()]
            parts = token.split("=", 1)
            frequency = self._frequency[token] = sum(
                1 for joined, members in self._joined
                if all(part in joined for part in parts)
                and any(all(part in lowered for part in parts) and token in _shapes_of(text) for text, lowered in members)
            )
        return frequency

    def is_rare_text(self, piece: str) -> bool:
        """Whether a piece of text (a run of Chinese) occurs in few of the run's groups."""
        groups = self._groups()
        frequency = sum(1 for members in groups.values() if any(piece in text for text, _ in members))
        return 0 < frequency < len(groups) and frequency <= max(RARE_MIN_GROUPS, int(len(groups) * RARE_SHARE))

    def is_rare(self, token: str) -> bool:
        if token in self.excluded or any(token.startswith(name + ".") for name in self.excluded):
            return False
        total = len(self._groups())
        frequency = self.document_frequency(token)
        return 0 < frequency < total and frequency <= max(RARE_MIN_GROUPS, int(total * RARE_SHARE))


def shared_tokens(change_text: str, signature_texts: Sequence[str], corpus: Corpus) -> list[str]:
    """Distinctive tokens the change's text shares with any signature text, longest first (the
    change's tokens, lower-cased; `shared_identifiers` gives each one's spelling in the line)."""
    return list(dict.fromkeys(match.change for match in shared_identifiers(change_text, signature_texts, corpus)))


@dataclass(frozen=True)
class IdentifierMatch:
    """One identifier a change and a signature both name: the same token, or two identifiers one
    of which contains the other part by part (`report.export.concurrency` and the thread
    `report-export-7`; the phrase `quote v2` and the flag `checkout.quote_v2`)."""

    change: str  # as the change names it (lower-cased)
    signature: str  # as the line names it (lower-cased)


def identifier_parts(token: str) -> tuple[str, ...]:
    """A token's words, lower-cased, split at separators and camelCase, numbers dropped (a thread's
    index or a pool's size is no part of what it names): `SkuLocalCache` → (sku, local, cache)."""
    spaced = _CAMEL_BOUNDARY.sub(" ", token)
    return tuple(part for part in _PART_SEPARATORS.split(spaced.lower()) if part and not part.isdigit())


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_TEXT_CHARS)
def _identifiers_of(text: str) -> frozenset[tuple[str, tuple[str, ...]]]:
    """(token, its parts) of each distinctive token of `text`, and of each phrase of two or more
    plain words the text writes side by side (`quote v2`), with the case kept for camelCase."""
    found: set[tuple[str, tuple[str, ...]]] = set()
    plain = _ISO.sub(" ", text)
    for raw in set(_RAW_TOKEN.findall(plain)):
        original = raw.strip(_EDGE).rstrip("/")
        for piece in _KEY_VALUE.split(original):
            piece = piece.strip(_EDGE)
            if piece and _shaped_word(piece):
                found.add((piece.lower(), identifier_parts(piece)))
    for phrase in _PHRASE.findall(plain):
        parts = identifier_parts(phrase)
        if len(parts) >= 2:
            found.add((" ".join(phrase.lower().split()), parts))
    return frozenset(found)


def _contains(longer: tuple[str, ...], shorter: tuple[str, ...]) -> bool:
    size = len(shorter)
    return any(longer[k: k + size] == shorter for k in range(len(longer) - size + 1))


def _same_identifier(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Two identifiers name one thing when one's words run inside the other's, at least two of
    them (one shared word is a coincidence of vocabulary, not an identifier)."""
    shorter, longer = sorted((one, other), key=len)
    return len(shorter) >= MIN_SHARED_PARTS and _contains(longer, shorter)


def _cjk_runs(text: str) -> set[str]:
    return set(_CJK_RUN.findall(text))


def _shared_cjk(change_text: str, signature_text: str) -> list[str]:
    """Runs of CJK characters (at least MIN_CJK_RUN) that the change and the line both write:
    a summary and a log line that name one feature in Chinese (`本地缓存`)."""
    found: set[str] = set()
    for run in _cjk_runs(change_text):
        for size in range(len(run), MIN_CJK_RUN - 1, -1):
            pieces = {run[k: k + size] for k in range(len(run) - size + 1)}
            hits = {piece for piece in pieces if piece in signature_text}
            if hits:
                found |= hits
                break
    return sorted(found, key=lambda piece: (-len(piece), piece))


def shared_identifiers(change_text: str, signature_texts: Sequence[str], corpus: Corpus) -> list[IdentifierMatch]:
    """The identifiers the change's text shares with any signature text, each rare in this run's
    evidence on both sides: the same distinctive token, identifiers that contain one another,
    a shared run of Chinese; a pair (ruleSet=v5) first, then the same token before containing
    identifiers, then longer before shorter."""
    change_tokens = distinctive_shapes(change_text)
    matches: dict[tuple[str, str], IdentifierMatch] = {}
    signature_shapes: set[str] = set()
    for text in signature_texts:
        signature_shapes |= distinctive_shapes(text)
    for token in change_tokens & signature_shapes:
        if corpus.is_rare(token):
            matches[(token, token)] = IdentifierMatch(token, token)
    change_ids = _identifiers_of(change_text)
    for text in signature_texts:
        for line_token, line_parts in _identifiers_of(text):
            for token, parts in change_ids:
                if (token, line_token) in matches or token == line_token or not _same_identifier(parts, line_parts):
                    continue
                line_rare = corpus.is_rare(line_token) if " " not in line_token else True
                change_rare = corpus.is_rare(token) if " " not in token else True
                if line_rare and change_rare:
                    matches[(token, line_token)] = IdentifierMatch(token, line_token)
        for piece in _shared_cjk(change_text, text):
            if corpus.is_rare_text(piece):
                matches.setdefault((piece, piece), IdentifierMatch(piece, piece))
    # The same token in both before identifiers that contain one another.
    return sorted(matches.values(), key=lambda m: (-("=" in m.change), m.change != m.signature, -len(m.change),
                                                   m.change, m.signature))


# --- one end of a link ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkEnd:
    """One cited piece of evidence as the link check reads it."""

    kind: str  # change | signature | onset | other
    text: str
    at: datetime | None
    subject: str = ""
    metric: str = ""
    first_of_kind: bool = False  # a signature: the first line of its kind in its read
    read_from: datetime | None = None  # a signature: where its read's window starts


@dataclass(frozen=True)
class Link:
    linked: bool
    kind: str  # change | event | resource | "" (none)
    detail: str
    tokens: tuple[str, ...] = ()
    minutes: float | None = None  # cause -> effect, in minutes
    cause: LinkEnd | None = None
    effect: LinkEnd | None = None


def parse_instant(text: str) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError, AttributeError):
        return None
    return stamp if stamp.tzinfo is not None else None


def minutes_between(earlier: datetime, later: datetime) -> float:
    return (later - earlier).total_seconds() / 60


def change_precedes(change_at: datetime, effect_at: datetime) -> bool:
    minutes = minutes_between(change_at, effect_at)
    return -CHANGE_AFTER_EFFECT_MIN <= minutes <= CHANGE_BEFORE_EFFECT_MIN


def coincide(first: datetime, second: datetime) -> bool:
    return abs(minutes_between(first, second)) <= COINCIDE_MIN


def signature_leads(signature_at: datetime, onset_at: datetime) -> bool:
    """An error signature can explain an onset when its first line comes at most COINCIDE_MIN
    minutes before it and no later than SIGNATURE_AFTER_ONSET_MIN after it (the onset's minute
    and the next, which points aggregate): a cause never follows its effect."""
    minutes = minutes_between(signature_at, onset_at)
    return -SIGNATURE_AFTER_ONSET_MIN <= minutes <= COINCIDE_MIN


def reports_series(line: str, metric: str) -> bool:
    """The line reports the very events the series counts: the catalogue types both as one
    failure mode (a `job … failed` line and a batch job failure count; `Connection is not
    available` and a pool's waiting threads)."""
    catalogue = configured_failure_modes()
    counted = {match.mechanism.id for match in catalogue.for_metric(metric)[:1]}
    return bool(counted & {mechanism.id for mechanism in catalogue.for_line(line)})


def explains_onset(signature: LinkEnd, onset: LinkEnd) -> bool:
    """A signature explains an onset (`signature_leads`), or — when it reports the very events
    the series counts (`reports_series`) — it merely coincides with it (within COINCIDE_MIN
    either side): the line then says what those events are (`Unable to connect to … on db-7`)."""
    if signature_leads(_at(signature), _at(onset)):
        return True
    return coincide(_at(signature), _at(onset)) and reports_series(signature.text, onset.metric)


def names_service(text: str, service: str) -> bool:
    return bool(service) and re.search(rf"(?<![A-Za-z0-9_\-]){re.escape(service)}(?![A-Za-z0-9_\-])", text, re.IGNORECASE) is not None


def _at(end: LinkEnd) -> datetime:
    """The time of an end kept for having one."""
    if end.at is None:
        raise ValueError(f"a {end.kind} end without a time")
    return end.at


def mechanism_link(change: LinkEnd, onsets: Sequence[LinkEnd]) -> tuple[LinkEnd, str, str] | None:
    """(the onset, the mechanism, the change's words) when the change names a setting of the
    failure mode the catalogue reads in the onset's metric (a TTL cut before a cache hit ratio
    falls, a pool size before the pool saturates, a log level before a disk fills) and precedes
    that onset (not in its minute after it) by at most MECHANISM_BEFORE_ONSET_MIN minutes. The catalogue's generic modes (any
    config change, any release) name no mechanism of their own and link nothing this way."""
    catalogue = configured_failure_modes()
    named = {m.id for m in catalogue.for_change("", change.text)} - GENERIC_MODES
    if not named:
        return None
    for onset in sorted(onsets, key=_at):
        minutes = minutes_between(_at(change), _at(onset))
        # The weakest link (no shared identifier, no new line): the change comes first, never in
        # the onset's minute after it (a log level changed once the disk was already filling).
        if not onset.metric or not 0 <= minutes <= MECHANISM_BEFORE_ONSET_MIN:
            continue
        for match in catalogue.for_metric(onset.metric):
            if match.mechanism.id in named:
                return onset, match.mechanism.id, catalogue.change_words(change.text, match.mechanism.id)
    return None


def new_kind_after(change: LinkEnd, signatures: Sequence[LinkEnd], onsets: Sequence[LinkEnd]) -> LinkEnd | None:
    """The earliest signature that is a new kind of line after the change: the first of its kind
    in a read that covers at least NEW_KIND_QUIET_BEFORE_MIN minutes before the change, starting
    at most NEW_KIND_AFTER_CHANGE_MIN minutes after it, and no later than the minute of the
    earliest cited onset (a cause never follows its effect) nor more than
    NEW_KIND_BEFORE_ONSET_MIN minutes before it (a new line long before is no part of it)."""
    change_at = _at(change)
    onset_at = min((_at(o) for o in onsets), default=None)
    for signature in sorted(signatures, key=_at):
        if not signature.first_of_kind or signature.read_from is None:
            continue
        if minutes_between(signature.read_from, change_at) < NEW_KIND_QUIET_BEFORE_MIN:
            continue
        after = minutes_between(change_at, _at(signature))
        if not 0 <= after <= NEW_KIND_AFTER_CHANGE_MIN:
            continue
        if onset_at is not None and not -NEW_KIND_BEFORE_ONSET_MIN <= minutes_between(onset_at, _at(signature)) <= CHANGE_AFTER_EFFECT_MIN:
            continue  # after the effect, or so long before it that the line is no part of it
        return signature
    return None


def saturable(metric: str) -> str:
    """The failure mode (id) whose limited resource the series measures (a pool's connections
    in use, a thread pool's active threads, memory, a disk), "" when it measures none."""
    for match in configured_failure_modes().for_metric(metric)[:1]:
        if match.mechanism.at_limit_resource and match.signal.at_limit is not None and match.signal.bad == "up":
            return match.mechanism.id
    return ""


def resource_link(signatures: Sequence[LinkEnd], onsets: Sequence[LinkEnd]) -> Link | None:
    """A resource that runs out, and what it slows: the onset of a series measuring a limited
    resource (`saturable`), lines of the same service that name that failure mode's exhaustion
    starting no earlier than it (at most `SIGNATURE_AFTER_ONSET_MIN` before: an onset is read to
    the minute) and within `RESOURCE_LINES_AFTER_MIN` after, and another onset of that service
    (the symptom) no earlier than the resource's, within `RESOURCE_BEFORE_EFFECT_MIN`. None when
    the ends hold no such chain."""
    catalogue = configured_failure_modes()
    for resource in sorted(onsets, key=_at):
        mechanism = saturable(resource.metric)
        if not mechanism:
            continue
        lines = [s for s in signatures if s.subject == resource.subject
                 and mechanism in {m.id for m in catalogue.for_line(s.text)}
                 and -SIGNATURE_AFTER_ONSET_MIN <= minutes_between(_at(resource), _at(s)) <= RESOURCE_LINES_AFTER_MIN]
        effects = [o for o in onsets if o is not resource and o.subject == resource.subject and o.metric != resource.metric
                   and 0 <= minutes_between(_at(resource), _at(o)) <= RESOURCE_BEFORE_EFFECT_MIN]
        if lines and effects:
            effect = min(effects, key=_at)
            minutes = minutes_between(_at(resource), _at(effect))
            return Link(True, "resource", f"{resource.metric} ({mechanism}) starts {minutes:.0f} min before {effect.metric}, "
                        f"and lines naming that exhaustion follow it", (), minutes, resource, effect)
    return None


def check_link(ends: Sequence[LinkEnd], corpus: Corpus) -> Link:
    """The link the cited ends establish (see the module docstring), or why there is none."""
    changes = [e for e in ends if e.kind == "change" and e.at is not None]
    signatures = [e for e in ends if e.kind == "signature" and e.at is not None]
    onsets = [e for e in ends if e.kind == "onset" and e.at is not None]
    effects = signatures + onsets
    if changes:
        if not effects:
            return Link(False, "", "a change is cited, but no anomaly onset or error signature to link it to")
        best: Link | None = None
        earliest = min(effects, key=_at)
        for change in changes:
            # The change's effect: the onsets and the lines that name what it names and start
            # after it; other cited lines (what a read also held) are no end of this link.
            following = [s for s in signatures if change_precedes(_at(change), _at(s))]
            sharing = [s for s in following if shared_tokens(change.text, [s.text], corpus)]
            # Without an onset, the effect is what the lines show after the change: a routine
            # warning the read also held before it is no effect of it, and no reason to refuse.
            first = min([*onsets, *sharing] or following or signatures, key=_at)
            minutes = minutes_between(_at(change), _at(first))
            if not change_precedes(_at(change), _at(first)):
                continue
            tokens = shared_tokens(change.text, [s.text for s in sharing], corpus)
            if tokens:
                return Link(True, "change", f"the change precedes the effect by {minutes:.0f} min and shares "
                            f"{', '.join(tokens[:3])} with the error signatures", tuple(tokens), minutes, change, first)
            kind_of = mechanism_link(change, onsets)
            if kind_of is not None:
                onset, mechanism, words = kind_of
                return Link(True, "change", f"the change names {words!r}, a setting of the failure mode ({mechanism}) "
                            f"of {onset.metric}, and precedes its onset by {minutes_between(_at(change), _at(onset)):.0f} min",
                            (words,), minutes, change, onset)
            novel = new_kind_after(change, signatures, onsets)
            if novel is not None:
                after = minutes_between(_at(change), _at(novel))
                return Link(True, "change", f"a new kind of error/warn line first appears {after:.0f} min after the "
                            "change (none of its kind in its read before) and no later than the effect",
                            (), minutes, change, first)
            best = best or Link(False, "", f"the change precedes the effect by {minutes:.0f} min but shares no "
                                "distinctive token with the cited error signatures", (), minutes, change, first)
        return best or Link(False, "", f"no cited change precedes the earliest cited effect ({earliest.kind} at "
                            f"{_at(earliest).isoformat()}) within {CHANGE_BEFORE_EFFECT_MIN} min")
    for signature in sorted(signatures, key=_at):
        for onset in onsets:
            related = signature.subject == onset.subject or names_service(signature.text, onset.subject)
            if related and explains_onset(signature, onset):
                minutes = minutes_between(_at(signature), _at(onset))
                return Link(True, "event", f"the signature's first occurrence and the onset are {abs(minutes):.0f} min apart",
                            (), minutes, signature, onset)
    exhausted = resource_link(signatures, onsets)
    if exhausted is not None:
        return exhausted
    if signatures and onsets:
        return Link(False, "", f"the cited signature does not start within {COINCIDE_MIN} min before the onset (or in its minute), or is unrelated")
    return Link(False, "", "the claim does not cite both ends of a link (a change or an error signature, and an anomaly)")


# --- reading a claim's cited evidence ------------------------------------------------------------

_ROLLBACK = re.compile(r"回滚|回退|rollback|roll back|rolled back|revert", re.IGNORECASE)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(?:分钟|min(?:ute)?s?(?![a-z]))")
_QUOTED = re.compile(r"「[^」]*」|“[^”]*”|『[^』]*』")


def end_of(item: VerifiedEvidence) -> LinkEnd:
    """How the link check reads one verified ref: from its stored facts, never its wording."""
    facts = item.facts
    if facts is None:
        return LinkEnd("other", item.matched_text, None)
    at = parse_instant(facts.at)
    if facts.kind == "change":
        return LinkEnd("change", item.matched_text, at, facts.subject)
    if facts.kind == "log_line" and facts.level.upper() in BAD_LEVELS:
        return LinkEnd("signature", item.matched_text, at, facts.subject, first_of_kind=facts.first_of_kind,
                       read_from=parse_instant(facts.window_start))
    if facts.kind == "metric_onset":
        return LinkEnd("onset", item.matched_text, at, facts.subject, facts.metric)
    return LinkEnd("other", item.matched_text, at, facts.subject, facts.metric)


def corpus_of(evidence: Iterable[VerifiedEvidence]) -> Corpus:
    """The run's verified evidence as a rarity corpus (each ref once), its subjects excluded."""
    seen: dict[tuple[int, str], VerifiedEvidence] = {}
    for item in evidence:
        seen.setdefault((item.source_invocation_id, item.raw_path), item)
    subjects = {item.facts.subject for item in seen.values() if item.facts is not None and item.facts.subject}
    return Corpus.of((item.matched_text for item in seen.values()), subjects)


def link_of(items: Sequence[VerifiedEvidence], corpus: Corpus) -> Link:
    """The link a claim's own verified evidence establishes."""
    return check_link([end_of(item) for item in items], corpus)


def asserts_cause(text: str, claim_type: str) -> bool:
    """A root_cause claim, or a statement whose own (unquoted) words assert a cause."""
    if claim_type == "root_cause":
        return True
    return extract(_QUOTED.sub(" ", text)).causal


def mask_link_minutes(text: str, link: Link) -> str:
    """`text` with the minutes between the link's ends blanked where it states them (`约 2 分钟`):
    the link check has verified that duration from the cited instants, so the value checks, which
    bind a number to one ref, do not judge it."""
    if not link.linked or link.minutes is None:
        return text
    minutes = abs(link.minutes)

    def blank(match: re.Match[str]) -> str:
        return " " * len(match.group(0)) if abs(float(match.group(1)) - minutes) <= 1.0 else match.group(0)

    return _DURATION.sub(blank, text)


def claim_link(claim_text: str, claim_type: str, items: Sequence[VerifiedEvidence], corpus: Corpus) -> Link | None:
    """The link check for one claim, or None when the claim asserts no cause that needs one: a
    root_cause claim always does; another claim does when its own words assert a cause that its
    incident evidence (not runbooks) does not itself state."""
    if claim_type != "root_cause":
        incident = "\n".join(i.matched_text for i in items if i.tool_name != LOOKUP_KNOWLEDGE)
        if not asserts_cause(claim_text, claim_type) or (incident and extract(incident).causal):
            return None
    return link_of(items, corpus)


def advises_rollback(text: str) -> bool:
    """Rollback advice: given only when a change is linked to the anomaly by a checked link."""
    return bool(_ROLLBACK.search(text))
