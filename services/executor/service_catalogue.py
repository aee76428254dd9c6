"""The executor's catalogue of services, and the resolution of the names a question uses.

Before any step runs, every name the plan (single-ReAct: the question) uses as a service is
looked up in the union of what the metrics and logs backends know: the estate's `service` table,
Prometheus' and Loki's label values. Exact spelling first, then ignoring case and the choice of
separator (`Payment_Service` is `payment-service`); a name still not found is unknown, with the
catalogue's close matches as suggestions. Nothing is ever called for an unknown name.

A single word (`frontend`, no separator) is a service only when the catalogue knows it, ignoring
case: the question's single words that it knows are added to the plan (`with_single_words`), and a
single word it does not know, or any single word when the catalogue cannot be read, is no service
at all: not named, not reported as unknown (`error`, `cpu`, `why` are words, not services).

At most `limit` known services are checked, in the order the question names them; the others are
reported as not checked, and so is a service no tool was called for in the end. When a backend cannot say which services it has, no name is refused (the
coverage says the catalogue was unavailable, and the tools report their own failures).

A triage question (Plan.triage: no service named, 「现在线上哪个服务有问题？」) checks the
catalogue's services themselves, in name order: `triage_resolution` checks the first ones (at most
the triage bound, and no more than their steps fit in a plan) and names the rest as not checked
(listing at most MAX_TRIAGE_UNCHECKED_LISTED of them; the coverage carries the catalogue's size);
`triage_plan` gives each checked service the steps the embedded planner gives any service.

Only the catalogue's own answers are used: nothing here knows any estate.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import cast

from opentelemetry import trace

from services.executor.tools.backends import ServiceCatalogueSource, ToolBackends
from shared.core.contracts import Plan, ServiceCoverage, TimeWindow, ToolInvocation, UnknownService
from shared.core.embedded_planner import service_steps
from shared.core.service_mentions import is_plain_word, plain_word_mentions

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 15.0
MAX_SUGGESTIONS = 3
# Close enough to suggest: the whole names and the parts where they differ must both be this alike.
SUGGESTION_CUTOFF = 0.7
ABBREVIATION_SCORE = 0.8
MAX_ERROR_CHARS = 300
# A triage's unchecked services named one by one, at most (the coverage gives the catalogue's size).
MAX_TRIAGE_UNCHECKED_LISTED = 100
_SEPARATORS = re.compile(r"[-_.]")


@dataclass(frozen=True)
class Catalogue:
    """The services the backends know, or why they could not say."""

    names: frozenset[str] = frozenset()
    available: bool = True
    error: str = ""


class ServiceCatalogue:
    """The union of the sources' service names, cached for `ttl_seconds` (failures are not)."""

    def __init__(self, sources: Sequence[ServiceCatalogueSource], ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sources = list(sources)
        self._ttl = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, Catalogue] | None = None
        self._tracer = trace.get_tracer("attest.executor")

    def snapshot(self) -> Catalogue:
        with self._lock:
            if self._cached is not None and self._clock() - self._cached[0] < self._ttl:
                return self._cached[1]
        catalogue = self._read()
        if catalogue.available:
            with self._lock:
                self._cached = (self._clock(), catalogue)
        return catalogue

    def _read(self) -> Catalogue:
        if not self._sources:
            return Catalogue(available=False, error="no backend lists its services")
        names: set[str] = set()
        with self._tracer.start_as_current_span("service catalogue") as span:
            for source in self._sources:
                try:
                    names.update(str(name) for name in source.service_names() if str(name).strip())
                except Exception as exc:  # a catalogue that cannot be read refuses nothing
                    detail = f"{getattr(source, 'source_name', type(source).__name__)}: {type(exc).__name__}: {exc}"
                    log.warning("service catalogue unavailable: %s", detail)
                    span.set_attribute("attest.catalogue.error", detail[:MAX_ERROR_CHARS])
                    return Catalogue(available=False, error=detail[:MAX_ERROR_CHARS])
            span.set_attribute("attest.catalogue.services", len(names))
        return Catalogue(names=frozenset(names))


def catalogue_of(backends: ToolBackends, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> ServiceCatalogue:
    """The catalogue of the metrics and logs backends (each asked once when they are one object)."""
    sources: list[ServiceCatalogueSource] = []
    candidates: tuple[object, ...] = (backends.metrics, backends.logs)
    for backend in candidates:
        if callable(getattr(backend, "service_names", None)) and all(backend is not s for s in sources):
            sources.append(cast(ServiceCatalogueSource, backend))  # it answers service_names()
    return ServiceCatalogue(sources, ttl_seconds)


# --- resolution ------------------------------------------------------------------------------------


def _folded(name: str) -> str:
    return _SEPARATORS.sub("-", name.strip().lower())


def _abbreviates(short: str, long: str) -> bool:
    """`svc` abbreviates `service`, `gw` `gateway`: same first letter, letters in order."""
    if not short or not long or short[0] != long[0] or len(short) >= len(long):
        return False
    rest = iter(long)
    return all(char in rest for char in short)


def similarity(name: str, candidate: str) -> float:
    """How alike two service names are: the lower of the whole names' ratio and the ratio of the
    parts left after their shared leading and trailing parts (`-service` alone makes nothing
    alike); 0.8 when they differ only by abbreviated parts."""
    a, b = _folded(name), _folded(candidate)
    parts_a, parts_b = a.split("-"), b.split("-")
    if len(parts_a) == len(parts_b) and all(
        x == y or _abbreviates(x, y) or _abbreviates(y, x) for x, y in zip(parts_a, parts_b)
    ):
        return 1.0 if parts_a == parts_b else ABBREVIATION_SCORE
    whole = difflib.SequenceMatcher(None, a, b).ratio()
    while len(parts_a) > 1 and len(parts_b) > 1 and parts_a[-1] == parts_b[-1]:
        parts_a, parts_b = parts_a[:-1], parts_b[:-1]
    while len(parts_a) > 1 and len(parts_b) > 1 and parts_a[0] == parts_b[0]:
        parts_a, parts_b = parts_a[1:], parts_b[1:]
    differing = difflib.SequenceMatcher(None, "-".join(parts_a), "-".join(parts_b)).ratio()
    return min(whole, differing)


def suggestions_for(name: str, names: Collection[str], limit: int = MAX_SUGGESTIONS) -> list[str]:
    scored = sorted(((similarity(name, candidate), candidate) for candidate in names), key=lambda p: (-p[0], p[1]))
    return [candidate for score, candidate in scored if score >= SUGGESTION_CUTOFF][:limit]


@dataclass
class Resolution:
    """The coverage, the catalogue spelling of each checked name, and what a tool may be called for."""

    coverage: ServiceCoverage
    # folded name -> the catalogue's spelling, for every known name (checked or not)
    spelling: dict[str, str] = field(default_factory=dict)
    catalogue: Catalogue = field(default_factory=Catalogue)
    # folded name -> the catalogue's spelling, for every name in the catalogue
    known: dict[str, str] = field(default_factory=dict)

    def checked(self, name: str) -> str | None:
        """The catalogue spelling of `name` when it is one of the checked services."""
        spelled = self.spelling.get(_folded(name))
        return spelled if spelled is not None and spelled in self.coverage.checked else None

    def callable_name(self, service: str) -> str | None:
        """The name a tool may be called with for `service` (the catalogue's spelling), or None:
        a service the catalogue does not know, or one the question named but that is left
        unchecked. Any name passes when the catalogue could not be read."""
        spelled: str | None = service if not self.catalogue.available else self.known.get(_folded(service))
        if spelled is None or spelled in self.coverage.unchecked:
            return None
        return spelled


def resolve_services(named: Sequence[str], catalogue: Catalogue, limit: int,
                     plannable: Collection[str] | None = None) -> Resolution:
    """Resolve `named` against `catalogue`. Of the known names, the first `limit` that are
    `plannable` (have steps; None: all) are checked, the rest are not."""
    by_folded: dict[str, str] = {}
    for name in sorted(catalogue.names):
        by_folded.setdefault(_folded(name), name)
    planned = None if plannable is None else {_folded(name) for name in plannable}
    coverage = ServiceCoverage(limit=limit, catalogue_unavailable=not catalogue.available)
    spelling: dict[str, str] = {}
    seen: set[str] = set()
    for raw in named:
        folded = _folded(raw)
        if not folded or folded in seen:
            continue
        if is_plain_word(raw) and (not catalogue.available or folded not in by_folded):
            continue  # a single word the catalogue does not know is a word, not a service
        seen.add(folded)
        coverage.named.append(raw)
        if not catalogue.available:
            spelled = raw
        elif raw in catalogue.names:
            spelled = raw
        elif folded in by_folded:
            spelled = by_folded[folded]
        else:
            coverage.unknown.append(UnknownService(name=raw, suggestions=suggestions_for(raw, catalogue.names)))
            continue
        spelling[folded] = spelled
        if len(coverage.checked) < limit and (planned is None or folded in planned):
            coverage.checked.append(spelled)
        else:
            coverage.unchecked.append(spelled)
    return Resolution(coverage=coverage, spelling=spelling, catalogue=catalogue, known=by_folded)


def known_single_words(text: str, catalogue: Catalogue) -> list[str]:
    """The single words of `text` that name a service of `catalogue` (ignoring case), spelled as
    the catalogue spells them, in order of appearance; none when the catalogue cannot be read."""
    if not catalogue.available:
        return []
    by_folded: dict[str, str] = {}
    for name in sorted(catalogue.names):
        by_folded.setdefault(_folded(name), name)
    return list(dict.fromkeys(by_folded[word] for word in plain_word_mentions(text) if word in by_folded))


def with_single_words(plan: Plan, words: Sequence[str], max_steps: int) -> Plan:
    """A NORMAL plan with steps for the catalogued single `words` it does not name yet (the steps
    the embedded planner gives any service, over the plan's window, before its runbook lookup).
    A word whose steps would take the plan past `max_steps` is named as not checked."""
    if plan.mode != "NORMAL" or plan.window is None or not words:
        return plan
    taken = {_folded(name) for name in plan_service_names(plan)[0]}
    added = [word for word in dict.fromkeys(words) if _folded(word) not in taken]
    if not added:
        return plan
    service_bound = [step for step in plan.steps if step.arguments.get("service")]
    rest = [step for step in plan.steps if not step.arguments.get("service")]
    checked: list[str] = []
    unchecked: list[str] = []
    for word in added:
        steps = service_steps(word, plan.window, list(plan.symptoms))
        if len(service_bound) + len(rest) + len(steps) <= max_steps:
            service_bound += steps
            checked.append(word)
        else:
            unchecked.append(word)
    return plan.model_copy(update={
        "services": [*plan.services, *checked],
        "steps": service_bound + rest,
        "unchecked_services": [*plan.unchecked_services, *unchecked],
        "missing_context": [c for c in plan.missing_context if c != "service"] if checked else plan.missing_context,
    })


def confirm_checked(coverage: ServiceCoverage, invocations: Sequence[ToolInvocation]) -> ServiceCoverage:
    """The coverage after the tools ran: a service counts as checked only if a tool was called
    for it (a model agent may skip one, a step budget may end first); the others are reported as
    not checked."""
    if not coverage.named:
        return coverage
    called = {str(inv.request.get("service")) for inv in invocations if inv.request.get("service")}
    skipped = [name for name in coverage.checked if name not in called]
    if not skipped:
        return coverage
    return coverage.model_copy(update={
        "checked": [name for name in coverage.checked if name in called],
        "unchecked": skipped + [name for name in coverage.unchecked if name not in skipped],
    })


def plan_service_names(plan: Plan) -> tuple[list[str], set[str]]:
    """(every name the plan uses as a service, in order; the names that have steps)."""
    stepped = [str(step.arguments["service"]) for step in plan.steps if step.arguments.get("service")]
    named = list(dict.fromkeys([*plan.services, *stepped, *plan.unchecked_services]))
    return named, set(stepped)


def restrict_plan(plan: Plan, resolution: Resolution) -> Plan:
    """The plan with steps only for checked services (spelled as the catalogue spells them). Steps
    without a service (a runbook lookup) stay only when some service is checked."""
    steps = []
    for step in plan.steps:
        service = step.arguments.get("service")
        if service is None or service == "":
            if resolution.coverage.checked or not resolution.coverage.named:
                steps.append(step)
            continue
        spelled = resolution.checked(str(service))
        if spelled is not None:
            steps.append(step.model_copy(update={"arguments": {**step.arguments, "service": spelled}}))
    return plan.model_copy(update={
        "services": list(resolution.coverage.checked) if resolution.coverage.named else list(plan.services),
        "steps": steps,
        "unchecked_services": [],
    })


# --- triage ----------------------------------------------------------------------------------------


def steps_per_service(window: TimeWindow | None = None, symptoms: Sequence[str] = ()) -> int:
    """How many steps checking one service takes (`service_steps`; they do not depend on the window)."""
    window = window or TimeWindow(start="2000-01-01T00:00:00Z", end="2000-01-01T01:00:00Z")
    return len(service_steps("service", window, list(symptoms)))


def triage_bound(limit: int, max_steps: int, per_service: int, reserved_steps: int = 0) -> int:
    """How many services a triage checks: at most `limit`, and no more than their steps (with the
    `reserved_steps` that name no service) fit in `max_steps`."""
    return max(0, min(limit, (max_steps - reserved_steps) // max(1, per_service)))


def triage_resolution(catalogue: Catalogue, limit: int) -> Resolution:
    """A triage's services: the catalogue's, in name order; the first `limit` are checked, the rest
    named as not checked. None is checked when the catalogue cannot be read."""
    if not catalogue.available:
        return Resolution(coverage=ServiceCoverage(limit=limit, catalogue_unavailable=True, triage=True),
                          catalogue=catalogue)
    names = sorted(catalogue.names)
    resolution = resolve_services(names[:limit + MAX_TRIAGE_UNCHECKED_LISTED], catalogue, limit)
    resolution.coverage = resolution.coverage.model_copy(update={"triage": True, "catalogue_size": len(names)})
    return resolution


def triage_plan(plan: Plan, resolution: Resolution) -> Plan:
    """A triage plan with the embedded planner's steps for each checked service, before the steps
    that name no service (a runbook lookup)."""
    if plan.window is None:
        return plan
    checked = list(resolution.coverage.checked)
    steps = [step for service in checked for step in service_steps(service, plan.window, list(plan.symptoms))]
    rest = [step for step in plan.steps if not step.arguments.get("service")]
    return plan.model_copy(update={"services": checked, "steps": steps + rest, "unchecked_services": []})
