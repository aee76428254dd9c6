"""A typed statement checked against the facts of the refs it cites: typed against typed, no prose.

    check_statement(statement, facts, modes) -> list[Refutation]   # empty: every field holds

`facts(ref)` gives what a cited ref states (`shared.core.evidence_facts`), or None when the ref
does not exist in this run; `modes` is the failure-mode catalogue. Each field of the statement is
checked on its own, and each refutation names the field it refutes:

| field | holds when |
|---|---|
| refs | an observed or inferred statement cites at least one ref, and every ref it cites exists |
| subject | every cited ref about a service is about the statement's subject |
| signal | metric: a cited series has that metric id; log: a cited line's template holds the signature's (ids and numbers masked on both sides); change: a cited change record has that kind |
| state | rise/fall: a cited onset (or end) moved that way, or a cited series summary the one rule for a series reads so (`shared.core.metric_anomaly.summary_reading`); level: a cited value ref; normal: a cited series summary that rule reads as quiet; absent: a cited search that found nothing; present: a cited line, change or non-empty search; event: a cited line or change |
| quantities | each is stated by a cited ref: same unit, an aggregate the ref states, the value once rounded to the statement's precision, the instant (to the minute when the statement gives no seconds), the window |
| quantity roles | peak, baseline: a cited point of the series (`instance`: the point of that instance); onset, end: the cited onset or end of a move the way the state says; latest: the cited last point of a move not ended. Together: one of each, onset/end/latest only on a rise or fall, never an end and an unended last point, the baseline before the peak and on the far side of it |
| level | every cited line carries the level the log signal states; for nothing found, the cited search was for those levels (and for the signal's words, when it names any) |
| at, span, actor | an event's instant is a cited line's or change record's, its actor a cited change record's author; a span runs from the first to the last of several cited lines |
| cause | cause and effect hold on their own, the cause does not start after the effect, they are not one signal, and the mechanism is catalogued |
| action | the mechanism is catalogued and has a step of that kind at that index |

A hypothesis may cite nothing: it is put forward, not observed. Nothing here reads text a model
wrote, and nothing raises on a malformed statement: what cannot be checked is refuted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.core.contracts import Quantity, RefFacts, StatedValue, Statement, StatementRef
from shared.core.evidence_facts import normalise_unit
from shared.core.failure_modes import FailureModes
from shared.core.metric_anomaly import summary_reading
from shared.log_templates import MASK_PREFIX, MASK_SUFFIX, mask

FactsOf = Callable[[StatementRef], RefFacts | None]

_METRIC_KINDS = frozenset({"metric_point", "metric_summary", "metric_onset", "metric_end"})
_EVENT_KINDS = frozenset({"log_line", "change"})
_SCOPE_KINDS = frozenset({"metric_scope", "log_scope", "change_scope"})
# Which stated values each aggregate may be read from (evidence_facts names them).
_AGGREGATE_VALUES: dict[str, frozenset[str]] = {
    "point": frozenset({"value"}),
    "max": frozenset({"max"}),
    "min": frozenset({"min"}),
    "median": frozenset({"median", "before", "after", "during", "since"}),
}
_DIRECTION = {"rise": "up", "fall": "down"}
_PLACEHOLDER = re.compile(re.escape(MASK_PREFIX) + r"[A-Z*]+" + re.escape(MASK_SUFFIX))
_MINUTES_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?:Z|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class Refutation:
    field: str  # refs | subject | signal | level | state | quantities | at | cause | action
    detail: str


@dataclass(frozen=True)
class _Cited:
    ref: StatementRef
    facts: RefFacts


def check_statement(statement: Statement, facts: FactsOf, modes: FailureModes) -> list[Refutation]:
    """Every field of `statement` that its cited refs do not state (module docstring)."""
    found: list[Refutation] = []
    cited: list[_Cited] = []
    for ref in statement.refs:
        ref_facts = facts(ref)
        if ref_facts is None:
            found.append(Refutation("refs", f"invocation {ref.source_invocation_id} has no ref {ref.raw_path[:80]!r}"))
        else:
            cited.append(_Cited(ref, ref_facts))
    if not statement.refs and statement.standing != "hypothesis" and statement.action is None:
        found.append(Refutation("refs", f"an {statement.standing} statement cites no ref"))
    found += _subject(statement, cited)
    found += _signal(statement, cited)
    found += _state(statement, cited)
    found += [item for quantity in statement.quantities for item in _quantity(quantity, cited, statement.state)]
    found += _episode(statement)
    found += _when(statement, cited)
    if statement.cause is not None:
        found += _cause(statement, facts, modes)
    if statement.action is not None:
        found += _action(statement, modes)
    return found


# --- fields -------------------------------------------------------------------------------------------


def _subject(statement: Statement, cited: list[_Cited]) -> list[Refutation]:
    subject = statement.subject.casefold()
    return [
        Refutation("subject", f"{item.ref.raw_path[:80]!r} is about {item.facts.subject[:60]!r}")
        for item in cited
        if item.facts.subject and item.facts.subject.casefold() != subject
    ]


def _signal(statement: Statement, cited: list[_Cited]) -> list[Refutation]:
    signal = statement.signal
    if signal is None or not cited:
        return []
    if signal.kind == "metric":
        metrics = {item.facts.metric for item in cited if item.facts.kind in _METRIC_KINDS | {"metric_scope"}}
        holds = signal.name in metrics if signal.name else bool(metrics)
    elif signal.kind == "log":
        lines = [item.facts for item in cited if item.facts.kind == "log_line"]
        templates = [_placeholders(line.signature) for line in lines]
        scopes = any(item.facts.kind == "log_scope" for item in cited)
        wanted = _placeholders(mask(signal.name))
        holds = any(wanted in template for template in templates) if wanted else bool(templates) or scopes
        if statement.state == "absent" and not templates:
            # Nothing found: the words and the levels searched for are the cited search's.
            searched = [item.facts for item in cited if item.facts.kind == "log_scope"]
            holds = bool(searched)
            if signal.name and searched and not any(scope.filter.casefold() == signal.name.casefold() for scope in searched):
                return [Refutation("state", f"no cited search was for {signal.name[:60]!r}")]
            if signal.level and not any(_levels(scope.level) == _levels(signal.level) for scope in searched):
                return [Refutation("level", f"no cited search was for {signal.level[:20]!r} lines")]
        elif signal.level and not (lines and all(line.level.casefold() == signal.level.casefold() for line in lines)):
            return [Refutation("level", f"the cited lines are not all {signal.level[:20]!r} lines")]
    else:
        kinds = {item.facts.change_kind for item in cited if item.facts.kind == "change"}
        scopes = any(item.facts.kind == "change_scope" for item in cited)
        holds = signal.name in kinds if signal.name and kinds else bool(kinds) or scopes
    return [] if holds else [Refutation("signal", f"no cited ref states the {signal.kind} {signal.name[:80]!r}")]


def _levels(levels: str) -> frozenset[str]:
    """The levels a search was for (`ERROR,WARN`, `ERROR/WARN`)."""
    return frozenset(level for level in re.split(r"[,/\s]+", levels.upper()) if level)


def _placeholders(template: str) -> str:
    """A template with every kind of masked value as one placeholder: words cut short of a line
    (`timeout=3000` of `timeout=3000ms`) mask a number where the line masks an id."""
    return _PLACEHOLDER.sub("<*>", template)


def _state(statement: Statement, cited: list[_Cited]) -> list[Refutation]:
    state = statement.state
    if state is None or not cited:
        return []
    kinds = {item.facts.kind for item in cited}
    if state in _DIRECTION:
        holds = any(
            (item.facts.kind in ("metric_onset", "metric_end") and item.facts.level == _DIRECTION[state])
            or _reading(item.facts) == state for item in cited
        )
    elif state == "level":
        holds = bool(kinds & _METRIC_KINDS)
    elif state == "normal":
        holds = any(_reading(item.facts) == "quiet" for item in cited)
    elif state == "absent":
        holds = any(item.facts.kind in _SCOPE_KINDS and item.facts.empty for item in cited)
    elif state == "present":
        holds = bool(kinds & _EVENT_KINDS) or any(
            item.facts.kind in _SCOPE_KINDS and not item.facts.empty for item in cited
        )
    else:  # event
        holds = bool(kinds & _EVENT_KINDS)
    return [] if holds else [Refutation("state", f"no cited ref states {state!r}")]


def _reading(facts: RefFacts) -> str:
    """What a cited series summary reads as by the one rule for a series (rise, fall, quiet or
    unclear); "" for any other ref."""
    reading = summary_reading(facts)
    return "" if reading is None else reading.state


def _quantity(quantity: Quantity, cited: list[_Cited], state: str | None) -> list[Refutation]:
    if any(_states(quantity, item.facts) and _plays(quantity, item.facts, state) for item in cited):
        return []
    shown = f"{quantity.aggregate} {quantity.value:g}{quantity.unit}"
    return [Refutation("quantities", f"no cited ref states {shown[:80]}" + (f" at {quantity.at}" if quantity.at else ""))]


def _states(quantity: Quantity, facts: RefFacts) -> bool:
    if quantity.window is not None and not (
        _same_instant(quantity.window.start, facts.window_start) and _same_instant(quantity.window.end, facts.window_end)
    ):
        return False
    if quantity.aggregate == "count":
        counted = facts.item_count if facts.kind in _SCOPE_KINDS else None
        return counted is not None and quantity.unit in ("", "count") and _rounds_to(float(counted), quantity)
    if quantity.aggregate == "ratio":
        return _ratio_holds(quantity, facts)
    unit = normalise_unit(quantity.unit)
    names = _AGGREGATE_VALUES.get(quantity.aggregate, frozenset())
    return unit is not None and any(
        value.name in names and value.unit == unit[0] and _rounds_to(value.value, quantity) and _at_holds(quantity, value, facts)
        for value in facts.values
    )


def _plays(quantity: Quantity, facts: RefFacts, state: str | None) -> bool:
    """Whether the ref that states `quantity` is what its role and instance say: a point of the
    series (of the named instance, for an instance's value); the onset or end of a move the way the
    statement's state says; the last point of a move not ended. A plain value may be any ref's."""
    if quantity.instance:
        return facts.kind == "metric_point" and facts.filter == quantity.instance
    role = quantity.role
    if role is None:
        return True
    if role in ("onset", "end"):
        return facts.kind == f"metric_{role}" and facts.level == _DIRECTION.get(state or "")
    point = facts.kind == "metric_point" and not facts.filter
    return point and (role != "latest" or facts.ongoing)


def _episode(statement: Statement) -> list[Refutation]:
    """An episode's quantities agree with one another and with the state: one of each role; a
    move's onset, end or unended last point only on a rise or a fall; an end and an unended last
    point never together; the baseline before the peak and on the other side of it, the way the
    series moved (for a level, either way but not level with it)."""
    roles = [item.role for item in statement.quantities if item.role is not None and not item.instance]
    if len(roles) != len(set(roles)):
        return [Refutation("quantities", "an episode states a role twice")]
    by_role = {item.role: item for item in statement.quantities if item.role is not None and not item.instance}
    found = []
    if set(by_role) & {"onset", "end", "latest"} and statement.state not in _DIRECTION:
        found.append(Refutation("state", "an onset, end or unended last point belongs to a rise or a fall"))
    if "end" in by_role and "latest" in by_role:
        found.append(Refutation("quantities", "a move both ended and not ended"))
    peak, baseline = by_role.get("peak"), by_role.get("baseline")
    if baseline is not None:
        if peak is None:
            found.append(Refutation("quantities", "a baseline without the peak it is compared with"))
        else:
            then, worst = _instant(baseline.at), _instant(peak.at)
            before = then is not None and worst is not None and then < worst
            way = {"rise": baseline.value < peak.value, "fall": baseline.value > peak.value}.get(
                statement.state or "", baseline.value != peak.value)
            if not (before and way):
                found.append(Refutation("quantities", "the baseline is not before the peak on the other side of it"))
    return found


def _when(statement: Statement, cited: list[_Cited]) -> list[Refutation]:
    """An event's instant is a cited line's or change record's, and its actor a cited change
    record's author; lines present over a span are several cited lines, the first and the last of
    them at its two ends."""
    found = []
    events = [item.facts for item in cited if item.facts.kind in _EVENT_KINDS]
    if statement.at and not any(_same_instant(statement.at, facts.at) for facts in events):
        found.append(Refutation("at", f"no cited line or change record is at {statement.at[:40]}"))
    if statement.actor and not any(facts.kind == "change" and facts.actor.casefold() == statement.actor.casefold()
                                   for facts in events):
        found.append(Refutation("at", f"no cited change record was made by {statement.actor[:60]!r}"))
    if statement.span is not None:
        instants = sorted(at.isoformat() for facts in events
                          if facts.kind == "log_line" and (at := _instant(facts.at)) is not None)
        holds = len(instants) >= 2 and _same_instant(statement.span.start, instants[0]) and _same_instant(
            statement.span.end, instants[-1])
        if not holds:
            found.append(Refutation("at", "the span is not from the first to the last of several cited lines"))
    return found


def _ratio_holds(quantity: Quantity, facts: RefFacts) -> bool:
    """A ratio is the new level over the old one of an onset (or an end)."""
    values = {value.name: value.value for value in facts.values}
    old, new = (values.get("before"), values.get("after")) if facts.kind == "metric_onset" else (
        values.get("during"), values.get("since"))
    if old is None or new is None or old == 0:
        return False
    return _rounds_to(new / old, quantity)


def _rounds_to(actual: float, quantity: Quantity) -> bool:
    if not (math.isfinite(actual) and math.isfinite(quantity.value)):
        return False
    step = 10.0 ** -quantity.precision
    return abs(actual - quantity.value) <= step / 2 + 1e-9 * max(1.0, abs(actual))


def _at_holds(quantity: Quantity, value: StatedValue, facts: RefFacts) -> bool:
    if not quantity.at:
        return True
    return _same_instant(quantity.at, value.at or facts.at)


def _same_instant(stated: str, actual: str) -> bool:
    """Equal instants; a stated time without seconds is the whole minute."""
    when, then = _instant(stated), _instant(actual)
    if when is None or then is None:
        return False
    if _MINUTES_ONLY.match(stated):
        return when <= then < when + timedelta(minutes=1)
    return when == then


def _instant(stamp: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return parsed if parsed.tzinfo is not None else None


def _cause(statement: Statement, facts: FactsOf, modes: FailureModes) -> list[Refutation]:
    link = statement.cause
    assert link is not None
    found = [
        Refutation("cause", f"{side}: {item.field}: {item.detail}")
        for side, part in (("cause", link.cause), ("effect", link.effect))
        for item in check_statement(part, facts, modes)
    ]
    if link.mechanism and link.mechanism not in modes.ids:
        found.append(Refutation("cause", f"mechanism {link.mechanism[:60]!r} is not catalogued"))
    if _same_signal(link.cause, link.effect):
        found.append(Refutation("cause", "the cause is the effect's own signal"))
    start, onset = _earliest(link.cause, facts), _earliest(link.effect, facts)
    if start is not None and onset is not None and start > onset:
        found.append(Refutation("cause", "the cause starts after its effect"))
    return found


def _same_signal(cause: Statement, effect: Statement) -> bool:
    return (
        cause.signal is not None and effect.signal is not None and cause.signal == effect.signal
        and cause.subject.casefold() == effect.subject.casefold() and cause.state == effect.state
    )


def _earliest(statement: Statement, facts: FactsOf) -> datetime | None:
    """When the statement's cited evidence starts: the earliest instant a cited ref is about."""
    instants = []
    for ref in statement.refs:
        ref_facts = facts(ref)
        if ref_facts is not None and ref_facts.at:
            instant = _instant(ref_facts.at)
            if instant is not None:
                instants.append(instant)
    return min(instants, default=None)


def _action(statement: Statement, modes: FailureModes) -> list[Refutation]:
    action = statement.action
    assert action is not None
    if action.mechanism not in modes.ids:
        return [Refutation("action", f"mechanism {action.mechanism[:60]!r} is not catalogued")]
    mechanism = modes.by_id(action.mechanism)
    steps = mechanism.next_steps_zh if action.kind == "next_step" else mechanism.remedies_zh
    if action.index >= len(steps):
        return [Refutation("action", f"{action.mechanism} has no {action.kind} {action.index}")]
    return []


def changes_state(statement: Statement) -> bool:
    """Whether the action a statement types changes the running system: decided by its kind."""
    return statement.action is not None and statement.action.kind == "remedy"
