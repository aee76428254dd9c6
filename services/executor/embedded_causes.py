"""Changes and causes in the embedded executor agent: the change records read, and per troubled
service the cause claimed — a change linked to the effect by a shared identifier, a new kind of
line after it or a failure mode's setting; else an error line that coincides with the onset, or a
limited resource that ran out before it — a change that merely came first as an observation, and
a change of a service with nothing wrong mentioned, never blamed (`shared/core/grounding/causal_link.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from services.executor.embedded_findings import (
    SEVERITY,
    Candidate,
    ChangeEntry,
    Findings,
    binding,
    change_statement,
    load_result,
    nothing_found,
    parse_ts,
    read_scope,
    ref_texts,
    sort_ts,
)
from services.executor.embedded_wording import bounded_summary, excerpt_with, quote_around, spelled
from services.executor.excerpt_choice import named_peer
from shared.config import configured_failure_modes
from shared.core.contracts import MissingInfo, ToolInvocation
from shared.core.evidence_facts import ref_facts
from shared.core.evidence_view import evidence_view
from shared.core.grounding.causal_link import (
    COINCIDE_MIN,
    RESOURCE_BEFORE_EFFECT_MIN,
    RESOURCE_LINES_AFTER_MIN,
    SIGNATURE_AFTER_ONSET_MIN,
    Corpus,
    IdentifierMatch,
    LinkEnd,
    change_precedes,
    coincide,
    mechanism_link,
    minutes_between,
    names_service,
    new_kind_after,
    parse_instant,
    reports_series,
    saturable,
    shared_identifiers,
)
from shared.core.log_levels import BAD_LEVELS
from shared.core.statement_render import render_statement
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID
from shared.core.tool_catalogue import QUERY_CHANGES
from shared.core.tool_results import ChangesResult

CHANGE_SCORE = 19.0  # above any log cluster (at most embedded_logs.LOG_BASE_SCORE + 10 + 3): a change just before an onset is the lead a why-question wants
ROUTINE_CHANGE_SCORE = 0.2  # a change with no anomaly after it: mentioned, after everything else
# A checked cause outranks every finding: it is what a why-question asks for.
CAUSE_SCORE = 60.0
# A change with no identifier in common with the effect counts as "just before" an onset within
# this many minutes before it (or in the onset's own minute: onsets are known to the minute only);
# a change that shares one may come earlier, within the link check's CHANGE_BEFORE_EFFECT_MIN.
CHANGE_BEFORE_ONSET_MIN = 60
# An error signature is taken as an event cause only when its first line falls no later than the
# minute after the onset's (onsets are minute points): a cause does not follow its effect.
CAUSE_AFTER_ONSET_MIN = SIGNATURE_AFTER_ONSET_MIN
MAX_EVENT_QUOTE = 100  # a cause claim stays one readable line (an answer's first line quotes it)


@dataclass(frozen=True)
class _ModeCause:
    related_change: ChangeEntry
    candidate: Candidate


def changes_findings(invocation: ToolInvocation, findings: Findings) -> None:
    refs = ref_texts(invocation)
    data = load_result(invocation, findings, ChangesResult)
    if data is None:
        return
    service, start, end = read_scope(invocation, data)
    if service:
        findings.changes_checked.add(service)
    if invocation.evidence_status == "NO_EVIDENCE":
        text = refs.get("summary")
        if text and service:
            statement = nothing_found(invocation, service, "change", start, end)
            findings.candidates.append(Candidate(
                kind="negative", service=service, no_hit=True, score=0.3, bindings=[binding(invocation, "summary", text)],
                text=render_statement(statement, None) + "。", statement=statement, preferred_negative=7,
            ))
        return
    for k, change in enumerate(data.changes):
        path = f"changes[{k}]"
        ts = parse_ts(change.ts)
        if path not in refs or ts is None:
            continue
        findings.changes.append(ChangeEntry(
            invocation=invocation, raw_path=path, ref_text=refs[path], ts=ts, stamp=change.ts,
            service=change.service or service, kind=change.kind, author=change.author, summary=change.summary,
        ))

def link_causes(findings: Findings, evidence: list[ToolInvocation], asked: set[str]) -> None:
    """Per troubled service: a linked change becomes a cause; else an ERROR signature that
    coincides with the onset; a change that merely came first is an observation (with a
    hypothesis); services whose change log shows nothing there are noted as such (an
    unrecorded change cannot be excluded). A change of a service with nothing wrong is
    mentioned as an observation, never blamed."""
    texts = [ref.text for inv in evidence for ref in evidence_view(inv).cited_refs()]
    names = {str(inv.request.get("service") or "") for inv in evidence} | {c.service for c in findings.changes}
    corpus = Corpus.of(texts, names)
    anomalies = [c for c in findings.candidates if c.kind == "anomaly" and parse_ts(c.onset_ts or "")]
    clusters = [c for c in findings.candidates if c.kind == "log_cluster" and c.signature and parse_ts(c.first_ts or "")]
    troubled = list(dict.fromkeys(c.service for c in anomalies + clusters))
    mentioned: set[int] = set()
    for service in troubled:
        # The anomaly the question asks about when there is one, else the earliest.
        own = sorted((c for c in anomalies if c.service == service),
                     key=lambda c: (not (c.symptoms & asked), sort_ts(c.onset_ts)))
        first = own[0] if own else None
        signatures = sorted((c for c in clusters if c.service == service), key=lambda c: sort_ts(c.first_ts))
        effect = first or signatures[0]
        effect_at = parse_ts((first.onset_ts if first else effect.first_ts) or "")
        assert effect_at is not None
        near = sorted(
            (change for change in findings.changes if change_precedes(change.ts, effect_at)),
            key=lambda change: (-change.ts.timestamp(), change.raw_path),
        )
        quiet = sorted((c for c in findings.link_signatures if c.service == service and parse_ts(c.first_ts or "")),
                       key=lambda c: sort_ts(c.first_ts))
        earliest = min((sort_ts(c.onset_ts) for c in own), default=None)
        linked = _linked_change(near, signatures + quiet, corpus, first, earliest)
        if linked is not None:
            change, signature, tokens = linked
            mentioned.add(id(change))
            findings.candidates.append(_change_cause(change, signature, tokens, first, effect_at))
            continue
        by_mode = _mechanism_change(near, [c for c in own if c.onset_ref is not None], service)
        if by_mode is not None:
            mentioned.add(id(by_mode.related_change))
            findings.candidates.append(by_mode.candidate)
            continue
        # Time alone is a weaker lead than a shared identifier: only a change in the hour
        # before the effect is named as having come first.
        own_near = [change for change in near if change.service == service
                    and minutes_between(change.ts, effect_at) <= CHANGE_BEFORE_ONSET_MIN]
        if own_near:
            change = own_near[0]
            mentioned.add(id(change))
            minutes = max(minutes_between(change.ts, effect_at), 0.0)
            found = _change_candidate(change, service, CHANGE_SCORE)
            found.symptoms, found.related, found.minutes_before = set(effect.symptoms), effect, minutes
            findings.candidates.append(found)
        elif service in findings.changes_checked:
            findings.missing.append(MissingInfo(
                text=(
                    f"变更记录中没有 {service} 在异常开始（约 {first.onset_ts if first else effect.first_ts}）前 "
                    f"{CHANGE_BEFORE_ONSET_MIN} 分钟内的发布或配置变更；未登记的变更无法排除。"
                ),
                tool_name=QUERY_CHANGES,
            ))
        if first is not None:
            lines = [c for c in clusters if c.service == service or names_service(c.excerpt, service)]
            event = _event_cause(first, lines, anomalies, troubled)
            if event is None:
                event = _resource_cause(first, own, signatures)
            if event is None and first.onset_ref is None:
                # The series asked about has no onset of its own (a sawtooth of restarts): the
                # cause is sought for the service's earliest anomaly that has one (the panic
                # that restarts it also starts its 5xx).
                timed = [c for c in own if c.onset_ref is not None]
                event = _event_cause(timed[0], lines, anomalies, troubled) if timed else None
            if event is not None:
                findings.candidates.append(event)
    # A change the causes above did not mention: observed, not blamed (the latest per service).
    for change in sorted(findings.changes, key=lambda c: (-c.ts.timestamp(), c.raw_path)):
        if id(change) in mentioned or change.service in troubled:
            continue
        mentioned.add(id(change))
        troubled.append(change.service)  # one per service
        findings.candidates.append(_change_candidate(change, change.service, ROUTINE_CHANGE_SCORE))

def _linked_change(near: list[ChangeEntry], signatures: list[Candidate], corpus: Corpus,
                   anomaly: Candidate | None, earliest: datetime | None = None,
                   ) -> tuple[ChangeEntry, Candidate, list[IdentifierMatch]] | None:
    """The latest change before the effect that shares a distinctive identifier with an
    error/warn signature starting after it, with that signature and the identifiers; else the
    latest change after which a new kind of error/warn line starts (`new_kind_after`, the
    link check's rule), with that line and no identifiers. Time alone being the weaker lead,
    such a change must also come before the service's earliest onset (`earliest`): a release
    after a disk began to fill did not fill it, whatever new warnings the filling brings."""
    for change in near:
        for signature in signatures:
            first_at = parse_ts(signature.first_ts or "")
            if signature.level not in BAD_LEVELS or first_at is None or not change_precedes(change.ts, first_at):
                continue
            matches = shared_identifiers(change.ref_text, [signature.signature[2]], corpus) if signature.signature else []
            if matches:
                return change, signature, matches
    onset_at = parse_ts(anomaly.onset_ts or "") if anomaly is not None and anomaly.onset_ref is not None else None
    onsets = [LinkEnd("onset", "", onset_at)] if onset_at is not None else []
    ends: list[tuple[LinkEnd, Candidate]] = []
    for signature in signatures:
        end = _signature_end(signature)
        if end is not None:
            ends.append((end, signature))
    if earliest is not None:
        onsets = [LinkEnd("onset", "", earliest)]
    for change in near:
        if earliest is not None and not change_precedes(change.ts, earliest):
            continue
        novel = new_kind_after(LinkEnd("change", change.ref_text, change.ts), [end for end, _ in ends], onsets)
        if novel is not None:
            return change, next(signature for end, signature in ends if end is novel), []
    return None

def _mechanism_change(near: list[ChangeEntry], anomalies: list[Candidate], service: str) -> _ModeCause | None:
    """The latest change of the service that names a setting of the failure mode of one of its
    anomalies' metrics, before that anomaly's onset (`mechanism_link`, the link check's rule):
    a cause citing the change and the onset."""
    for change in (c for c in near if c.service == service):
        onsets = [LinkEnd("onset", "", parse_ts(a.onset_ts or ""), a.service, a.metric) for a in anomalies
                  if parse_ts(a.onset_ts or "") is not None]
        found = mechanism_link(LinkEnd("change", change.ref_text, change.ts, change.service), onsets)
        if found is None or not found[2]:
            continue
        onset, _, words = found
        anomaly = next(a for a in anomalies if a.metric == onset.metric)
        assert anomaly.onset_ref is not None
        text = (
            f"{change.service} 在 {change.stamp} 的 {change.kind} 变更「{bounded_summary(change.summary)}」"
            f"很可能是 {anomaly.metric} {anomaly.moved}的原因：变更涉及 {words}，且变更早于 {anomaly.metric} "
            f"开始{anomaly.moved}（约 {anomaly.onset_ts}）。"
        )
        bindings = [binding(change.invocation, change.raw_path, change.ref_text),
                    binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2])]
        return _ModeCause(change, Candidate(
            kind="cause", service=service, text=text, bindings=bindings, score=CAUSE_SCORE,
            symptoms=set(anomaly.symptoms), first_ts=change.stamp, support="indirect", link_token=words,
            related=anomaly, change_linked=True,
        ))
    return None

def _change_cause(change: ChangeEntry, signature: Candidate, matches: list[IdentifierMatch], anomaly: Candidate | None,
                  effect_at: datetime) -> Candidate:
    assert signature.signature is not None
    log_invocation, log_path, log_text = signature.signature
    token = spelled(matches[0].change, change.ref_text) if matches else ""
    in_line = spelled(matches[0].signature, log_text) if matches else ""
    line_excerpt = (excerpt_with(log_text, in_line) if in_line else signature.decisive) or signature.excerpt
    bindings = [
        binding(change.invocation, change.raw_path, change.ref_text),
        binding(log_invocation, log_path, line_excerpt),
    ]
    # Names only where they differ from the change's service: the line stays short.
    def owner(service: str) -> str:
        return "" if service == change.service else f"{service} 的 "

    if anomaly is not None and anomaly.onset_ref is not None:
        effect = f"{owner(anomaly.service)}{anomaly.metric} {anomaly.moved}"
        began = f"{anomaly.metric} 开始{anomaly.moved}（约 {anomaly.onset_ts}）"
        bindings.append(binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2]))
    elif anomaly is not None and anomaly.bindings:
        # A series whose onset has no ref of its own (a sawtooth): its cited level names it.
        effect = f"{owner(anomaly.service)}{anomaly.metric} {anomaly.moved}"
        began = f"该日志首次出现（{signature.first_ts}）"
        bindings.append(anomaly.bindings[0])
    else:
        effect = f"{owner(signature.service)}{signature.level} 日志"
        began = f"该日志首次出现（{signature.first_ts}）"
    line = f"{owner(signature.service)}{signature.level} 日志"
    if not matches:
        # A new kind of line after the change: what it says, and when it first appeared.
        quote = quote_around(line_excerpt.strip(), None, MAX_EVENT_QUOTE)
        shared = f"变更后才开始出现的 {line}「{quote}」（首次出现于 {signature.first_ts}）"
    elif token.lower() == in_line.lower():
        shared = f"变更内容与 {line}都出现 {token}"
    else:
        shared = f"变更内容提到 {token}，{line}中出现 {in_line}"
    # The minutes between are said by the two instants (the change's, the onset's), which
    # every checker binds to the cited refs; a bare duration binds to no single ref.
    text = (
        f"{change.service} 在 {change.stamp} 的 {change.kind} 变更「{bounded_summary(change.summary)}」"
        f"很可能是 {effect}的原因：{shared}，且变更早于{' ' if began[:1].isascii() else ''}{began}。"
    )
    return Candidate(
        kind="cause", service=anomaly.service if anomaly else signature.service, text=text, bindings=bindings,
        score=CAUSE_SCORE, symptoms=set(anomaly.symptoms if anomaly else signature.symptoms),
        first_ts=change.stamp, support="indirect", link_token=token, related=anomaly, change_linked=True,
    )

def _event_cause(anomaly: Candidate, clusters: list[Candidate], anomalies: list[Candidate],
                 troubled: list[str]) -> Candidate | None:
    """An ERROR/FATAL signature whose first line coincides with the onset (at most
    CAUSE_AFTER_ONSET_MIN after it): the event claimed as the anomaly's cause. Said with it,
    each cited: a saturation of a specific kind that starts with it on the same service (the
    signature's own symptom, e.g. a pool filling up while pool timeouts start: the resource,
    not the generic latency, is what an SRE acts on), and the quote keeps the name of another
    checked service the line points to (an upstream)."""
    onset_at = parse_ts(anomaly.onset_ts or "")
    if onset_at is None or anomaly.onset_ref is None:
        return None
    near: list[tuple[int, float, float, Candidate]] = []
    for cluster in clusters:
        first_at = parse_ts(cluster.first_ts or "")
        # An error line; or a warning that names a failure mode of the catalogue (a GC pause,
        # a pool at its limit): a mechanism, not noise.
        typed = cluster.level == "WARN" and bool(configured_failure_modes().line_mentions(cluster.excerpt))
        if (cluster.level not in ("ERROR", "FATAL") and not typed) or first_at is None or cluster.signature is None:
            continue
        minutes = minutes_between(onset_at, first_at)
        # A line that reports the very events the series counts says what they are, a few
        # minutes either way (`causal_link.explains_onset`).
        after = COINCIDE_MIN if reports_series(cluster.signature[2], anomaly.metric) else CAUSE_AFTER_ONSET_MIN
        if -COINCIDE_MIN <= minutes <= after:
            near.append((SEVERITY.get(cluster.level, len(SEVERITY)), minutes, -cluster.score, cluster))
    if not near:
        return None
    # The most severe line, then the one that started first: a crash before the restarts it
    # causes, never the back-off warning that follows it.
    *_, cluster = min(near, key=lambda item: item[:3])
    assert cluster.signature is not None
    log_invocation, log_path, log_text = cluster.signature
    upstream = next((s for s in troubled if s not in (cluster.service, anomaly.service) and names_service(log_text, s)), None)
    excerpt = (excerpt_with(log_text, upstream) if upstream else None) or cluster.decisive or cluster.excerpt
    quote = quote_around(excerpt.strip(), upstream, MAX_EVENT_QUOTE)
    bindings = [binding(log_invocation, log_path, excerpt)]
    specific = {s for s in cluster.symptoms if s in SYMPTOMS_BY_ID and not SYMPTOMS_BY_ID[s].generic}
    resource = next((
        c for c in sorted(anomalies, key=lambda c: sort_ts(c.onset_ts))
        if c is not anomaly and c.service == anomaly.service and c.onset_ref is not None and c.symptoms & specific
        and coincide(sort_ts(c.onset_ts), onset_at)
    ), None)
    where = f"{cluster.service} 的 " if cluster.service != anomaly.service else ""
    # The other end of the failing call, when the line names one the quote leaves out (a
    # host in a JSON field, at the tail of a long exception): what an SRE checks next.
    peer = None if upstream else named_peer(log_text, (cluster.service, anomaly.service))
    toward = f"，调用对象 {peer}" if peer and peer.lower() not in quote.lower() else ""
    cause = f"{where}{cluster.level} 日志「{quote}」（首次出现于 {cluster.first_ts}{toward}）"
    if resource is not None:
        assert resource.onset_ref is not None
        cause = f"{anomaly.service} 的 {resource.metric} {resource.moved}（约自 {resource.onset_ts} 起）与 {cause}"
        bindings.append(binding(resource.onset_ref[0], resource.onset_ref[1], resource.onset_ref[2]))
    text = (
        f"{cause}很可能是 {anomaly.service} 的 {anomaly.metric} {anomaly.moved}（约自 {anomaly.onset_ts} 起）的直接原因："
        f"{'' if resource is not None else '二者'}开始时间接近。"
    )
    bindings.append(binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2]))
    return Candidate(
        kind="cause", service=anomaly.service, text=text, bindings=bindings,
        score=CAUSE_SCORE - 1, symptoms=set(anomaly.symptoms) | (resource.symptoms if resource else set()),
        first_ts=cluster.first_ts, support="indirect",
    )

def _resource_cause(anomaly: Candidate, own: list[Candidate], signatures: list[Candidate]) -> Candidate | None:
    """A limited resource that ran out before the symptom (`causal_link.resource_link`): a
    series measuring it (a pool's connections in use, memory …) starts rising no later than
    the anomaly, and lines naming that failure mode's exhaustion follow it — said as one
    chain, each end cited: the resource's onset, the first line, the anomaly's onset."""
    if saturable(anomaly.metric):
        # The anomaly asked about (or the earliest) is the resource itself: its effect is the
        # service's first other anomaly that starts after it (the errors of an OOM).
        later = sorted((c for c in own if not saturable(c.metric) and c.onset_ref is not None
                        and (parse_ts(c.onset_ts or "") or datetime.min.replace(tzinfo=UTC))
                        >= (parse_ts(anomaly.onset_ts or "") or datetime.max.replace(tzinfo=UTC))),
                       key=lambda c: sort_ts(c.onset_ts))
        if not later:
            return None
        anomaly = later[0]
    onset_at = parse_ts(anomaly.onset_ts or "")
    if onset_at is None or anomaly.onset_ref is None:
        return None
    catalogue = configured_failure_modes()
    for resource in sorted(own, key=lambda c: parse_ts(c.onset_ts or "") or onset_at):
        mechanism = saturable(resource.metric)
        resource_at = parse_ts(resource.onset_ts or "")
        if (resource is anomaly or not mechanism or resource.onset_ref is None or resource_at is None
                or not 0 <= minutes_between(resource_at, onset_at) <= RESOURCE_BEFORE_EFFECT_MIN):
            continue
        lines = [c for c in signatures if c.signature is not None and c.level in BAD_LEVELS
                 and mechanism in {m.id for m in catalogue.for_line(c.signature[2])}
                 and -SIGNATURE_AFTER_ONSET_MIN <= minutes_between(resource_at, parse_ts(c.first_ts or "") or resource_at)
                 <= RESOURCE_LINES_AFTER_MIN]
        if not lines:
            continue
        line = min(lines, key=lambda c: (SEVERITY.get(c.level, len(SEVERITY)), parse_ts(c.first_ts or "")))
        assert line.signature is not None
        log_invocation, log_path, _ = line.signature
        excerpt = line.decisive or line.excerpt
        quote = quote_around(excerpt.strip(), None, MAX_EVENT_QUOTE)
        text = (
            f"{resource.service} 的 {resource.metric} {resource.moved}（约自 {resource.onset_ts} 起），"
            f"随后出现 {line.level} 日志「{quote}」（首次出现于 {line.first_ts}）："
            f"很可能是 {anomaly.service} 的 {anomaly.metric} {anomaly.moved}（约自 {anomaly.onset_ts} 起）的原因。"
        )
        bindings = [binding(resource.onset_ref[0], resource.onset_ref[1], resource.onset_ref[2]),
                    binding(log_invocation, log_path, excerpt),
                    binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2])]
        return Candidate(
            kind="cause", service=anomaly.service, text=text, bindings=bindings, score=CAUSE_SCORE - 1,
            symptoms=set(anomaly.symptoms) | set(resource.symptoms), first_ts=resource.onset_ts, support="indirect",
        )
    return None


def _change_candidate(change: ChangeEntry, service: str, score: float) -> Candidate:
    """A change record as a finding: its statement (the service, kind, instant and author), the
    sentence written from it, and the binding that cites it, whose excerpt (the summary, quoted:
    its words, 无代码路径变更 …, are the record's, not our assertion) the sentence shows."""
    summary = change.summary.strip()
    excerpt = summary if summary and summary in change.ref_text else change.ref_text
    statement = change_statement(change.invocation, change.raw_path, change.service, change.kind, change.stamp,
                                 change.author)
    return Candidate(kind="change", service=service, score=score, first_ts=change.stamp, statement=statement,
                     text=render_statement(statement, None, quote=excerpt) + "。",
                     bindings=[binding(change.invocation, change.raw_path, excerpt)])


def _signature_end(signature: Candidate) -> LinkEnd | None:
    """A log cluster's first line as the link check reads it (its stored facts)."""
    if signature.signature is None:
        return None
    invocation, path, text = signature.signature
    facts = ref_facts(invocation, path)
    if facts is None or facts.kind != "log_line":
        return None
    return LinkEnd("signature", text, parse_instant(facts.at), facts.subject, first_of_kind=facts.first_of_kind,
                   read_from=parse_instant(facts.window_start))
