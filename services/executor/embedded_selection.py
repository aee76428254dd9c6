"""Which of the embedded executor agent's findings become claims: for a yes/no question its own
evidence (or that it is absent), the hypothesis' signal, thing or peer it names, and a change when
it asks about one; otherwise every troubled service's strongest finding first, then what was asked,
then how normal services look, within the per-service and per-answer caps.
"""

from __future__ import annotations

from services.executor.embedded_findings import SEVERITY, Candidate
from shared.config import configured_failure_modes
from shared.core.contracts import QuestionIntent
from shared.core.grounding.causal_link import names_service
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID
from shared.core.tool_catalogue import QUERY_CHANGES

MAX_ANOMALY_CLAIMS_PER_SERVICE = 3
MAX_LOG_CLAIMS_PER_SERVICE = 2


def answering(candidates: list[Candidate], intent: QuestionIntent, asked: set[str],
              max_claims: int, max_narrow_claims: int) -> list[Candidate]:
    """The findings that answer what `intent` reads (one question, or one part of a compound one),
    within the agent's caps on claims (`max_claims`; `max_narrow_claims` for a yes/no question)."""
    narrow = intent.confirmation
    hypothesis = hypothesis_symptoms(intent)
    # A change, an event or a cause answers "why", never "is it true": narrow answers leave
    # them out — unless what is asked is whether a change caused it.
    about_change = narrow and intent.hypothesis_change
    kept = [
        c for c in candidates
        if about_change or not (narrow and (c.kind in ("cause", "event") or (c.kind == "change" and c.related is not None)))
    ]
    return _select(kept, asked, narrow, max_claims, max_narrow_claims, hypothesis, about_change,
                   _hypothesis_entities(intent) if narrow else frozenset(),
                   _hypothesis_peers(intent) if narrow else ())


def _select(candidates: list[Candidate], asked: set[str], narrow: bool, max_claims: int, max_narrow_claims: int,
            hypothesis: frozenset[str] = frozenset(), about_change: bool = False,
            entities: frozenset[str] = frozenset(), peers: tuple[str, ...] = ()) -> list[Candidate]:
    positives = sorted((c for c in candidates if c.kind != "negative"), key=lambda c: -c.score)
    negatives = sorted((c for c in candidates if c.kind == "negative"), key=lambda c: (c.preferred_negative, -c.score))

    def relevant(candidate: Candidate) -> bool:
        return not asked or bool(candidate.symptoms & asked)

    # A question about several services: every service whose evidence shows something wrong
    # gets its strongest finding in first, so that none is crowded out by another service's
    # (a checked service's anomaly is never left out).
    findings = [c for c in positives if c.kind in ("anomaly", "log_cluster")]
    troubled = list(dict.fromkeys(c.service for c in findings))

    def one_per_service(pool: list[Candidate]) -> list[Candidate]:
        firsts = [next(c for c in pool if c.service == service) for service in dict.fromkeys(c.service for c in pool)]
        return firsts + [c for c in pool if c not in firsts]

    routine = [c for c in positives if c.kind == "change" and c.related is None]
    if narrow:
        # Confirm the one thing asked: its own evidence, else the evidence that it is absent.
        # The findings that show more of what was asked first (a log line naming both the
        # premise and the hypothesis before a metric showing one of them), then by score.
        covering = sorted((c for c in positives if relevant(c) and c not in routine and c.kind in ("anomaly", "log_cluster")),
                          key=lambda c: -len(c.symptoms & (asked | hypothesis)))
        chosen = one_per_service(covering)
        if hypothesis and not any(c.symptoms & hypothesis for c in chosen):
            # 「报错是不是因为磁盘满了」: the premise (errors) is shown, and so is the hypothesis'
            # own signal read in full — a quiet series answers 「证据不支持」.
            on_signal = [c for c in negatives if c.symptoms & hypothesis]
            chosen = sorted(on_signal, key=lambda c: c.no_hit)[:1] + chosen
        if entities and not any(_typed(c) & entities for c in chosen):
            # 「是线程池耗尽的问题吗」: the thing the catalogue types the hypothesis as — a
            # finding about that very thing (a thread pool, not a database pool), else its
            # series read quiet — goes first, so that the answer is about it.
            on_entity = [c for c in positives if c.kind in ("anomaly", "log_cluster") and _typed(c) & entities]
            quiet = [c for c in negatives if not c.no_hit and _typed(c) & entities]
            chosen = (on_entity or quiet)[:1] + chosen
        if peers and not any(_names_any(c, peers) for c in chosen):
            # 「是 pay.internal 不可用的问题吗」: what names that host or service goes first.
            chosen = [c for c in positives if c.kind in ("anomaly", "log_cluster") and _names_any(c, peers)][:1] + chosen
        if not chosen:
            chosen = [c for c in negatives if relevant(c) and not c.no_hit] + [c for c in negatives if c.no_hit]
        if not chosen:
            # Nothing reads the premise either way (「实例总是被重启」 with no restart series):
            # what the evidence does show is the answer's ground, not silence.
            chosen = [c for c in positives if c.kind in ("anomaly", "log_cluster")][: max_narrow_claims]
        service_count = len({c.service for c in chosen})
        chosen = chosen[: max_narrow_claims * max(1, service_count)]
        if entities:
            # The line that names the thing (a `panic:`, a RejectedExecutionException) says
            # more than a series typed as it, and the most severe such line more than a
            # back-off warning about it: shown too unless a line as severe already is.
            def severity(c: Candidate) -> int:
                return SEVERITY.get(c.level, len(SEVERITY))

            lines = sorted((c for c in positives if c.kind == "log_cluster" and _typed(c) & entities),
                           key=lambda c: (severity(c), c.first_ts or ""))
            shown = [c for c in chosen if c.kind == "log_cluster" and _typed(c) & entities]
            if lines and not any(severity(c) <= severity(lines[0]) for c in shown):
                chosen += lines[:1]
        if about_change:
            # 「是不是新版本导致的」: the change first — linked, else the one that came first,
            # else any in the window, else the search that found none — then the premise.
            change_first = (
                [c for c in positives if c.kind == "cause" and c.change_linked]
                or [c for c in positives if c.kind == "change" and c.related is not None]
                or routine
                or [c for c in negatives if c.no_hit and any(b.tool_name == QUERY_CHANGES for b in c.bindings)]
            )[:1]
            return change_first + [c for c in chosen if c not in change_first]
        # A change in the window of a service with nothing wrong is mentioned, never blamed.
        normal = {c.service for c in chosen if c.kind == "negative"} - {c.service for c in chosen if c.kind != "negative"}
        return chosen + [c for c in routine if c.service in normal]

    selected: list[Candidate] = []
    counts: dict[tuple[str, str], int] = {}
    budget = max(max_claims, len(troubled))

    def take(candidate: Candidate) -> None:
        if candidate in selected or len(selected) >= budget:
            return
        cap = {"anomaly": MAX_ANOMALY_CLAIMS_PER_SERVICE, "log_cluster": MAX_LOG_CLAIMS_PER_SERVICE, "change": 1,
               "cause": 1}.get(candidate.kind, 2)
        key = (candidate.service, candidate.kind)
        if counts.get(key, 0) >= cap:
            return
        counts[key] = counts.get(key, 0) + 1
        selected.append(candidate)

    if len(troubled) > 1:
        for service in troubled:
            own = [c for c in findings if c.service == service]
            take(next((c for c in own if relevant(c)), own[0]))
    for candidate in positives:
        if asked and relevant(candidate):
            take(candidate)
    services = list(dict.fromkeys(c.service for c in candidates))
    for service in services:
        # A change alone is no finding: a service whose only record is a change looks normal.
        own_positive = [c for c in positives if c.service == service and c.kind != "change"]
        own_negative = [c for c in negatives if c.service == service]
        if not own_positive:
            # A service that looks normal: say so, with what was asked about first.
            own_negative.sort(key=lambda c: not relevant(c))
            for candidate in own_negative[:2]:
                take(candidate)
        elif asked and not any(relevant(c) for c in own_positive):
            for candidate in [c for c in own_negative if relevant(c) and not c.no_hit][:1]:
                take(candidate)
    for candidate in positives:
        take(candidate)
    return selected


def _hypothesis_entities(intent: QuestionIntent) -> frozenset[str]:
    """The things (a thread pool, a GC, a lock …) the failure-mode catalogue types a yes/no
    question's hypothesis as."""
    if intent.kind != "yes_no" or intent.hypothesis_change:
        return frozenset()
    return frozenset(mention.entity for mention in configured_failure_modes().hypothesis_in(intent.hypothesis))


def _hypothesis_peers(intent: QuestionIntent) -> tuple[str, ...]:
    """The services and hosts a yes/no question's hypothesis blames (「是 pay.internal 挂了吗」)."""
    return intent.blamed if intent.kind == "yes_no" else ()


def _names_any(candidate: Candidate, names: tuple[str, ...]) -> bool:
    return any(names_service(candidate.text, name) for name in names)


def _typed(candidate: Candidate) -> set[str]:
    """The things the catalogue types a finding as, by its words and its series."""
    return set(configured_failure_modes().entities_in(candidate.text, [candidate.metric] if candidate.metric else []))


def hypothesis_symptoms(intent: QuestionIntent) -> frozenset[str]:
    """The specific symptoms a yes/no question's hypothesis names (all it names when none is
    specific)."""
    named = list(intent.hypothesis_symptoms)
    specific = [s for s in named if s in SYMPTOMS_BY_ID and not SYMPTOMS_BY_ID[s].generic]
    return frozenset(specific or named)
