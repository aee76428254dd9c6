"""The first line of an answer: a direct answer to the question, from verified findings only.

Both modes use it: the composer over the verifier's claim checks (multi-agent), the embedded
single-ReAct agent over its Analyses; the single-ReAct answer guard checks a Draft's conclusion
against `OPENINGS`. A finding is one verified sentence with its citation; its state and signals
come from the caller (claim type, the tools it cites) and from its own words (`finding_signals`).

The decision table, by question kind (`shared/core/question_intent.py`):

- yes_no — a confirmed abnormal finding on the hypothesis' signal → 「是：…」 (never under
  REJECT); else a confirmed normal finding on it → 「证据不支持：…（<signal> 正常：…）」; else
  「无法确认：缺少 …」. A hypothesis that links services (「A 和 B 是同一个问题吗」) is 「是」 only
  when one confirmed finding names both;
- why — a confirmed cause finding (a checked link, `shared/core/grounding/causal_link.py`) → 「最可能的
  原因：…」; else 「原因尚未由证据确认」 and the strongest lead (what the question names first);
- health — 「在所查范围内未发现异常（<scope>）」 when nothing confirmed is abnormal and something
  was checked, else 「发现异常：…」 (never 健康 or 排除: absence in the checked scope is all the
  evidence shows); abnormal findings that were not confirmed are counted after it (「另有 N 项
  异常说法未能核实」), never quoted; a triage question (which services are abnormal?) names the
  subject (first) service of every confirmed abnormal finding: 「发现异常：a、b 有已核实的异常——…」;
- what — the confirmed finding about the signal the question names (「那它的内存呢？」), abnormal
  or not (normal not under REJECT); else the main confirmed finding.

A compound question (「连接池耗尽了吗？CPU 高不高？」) is answered part by part: the first line
answers its first part, and each other part gets a line of its own by the same table,
「另问「<part>」：<its answer>」 (`part_lines`).

Under REJECT (some claim was contradicted or fabricated) the line never says 「是」, never names a
cause, and says neither 「证据不支持」 nor 「在所查范围内未发现异常」: the rejected output is no
ground for denying anything either, so those become 「无法确认：…」. A confirmed abnormal finding
is still reported (「发现异常：…」).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from shared.config import configured_failure_modes
from shared.core.contracts import QuestionIntent
from shared.core.grounding.causal_link import names_service
from shared.core.question_intent import hypothesis_label
from shared.core.service_mentions import extract_service_names
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, find_symptoms, symptoms_for_log, symptoms_for_metric

ABNORMAL, NORMAL, CHANGE, CAUSE = "abnormal", "normal", "change", "cause"
FINDING_STATES = (ABNORMAL, NORMAL, CHANGE, CAUSE)

YES = "是："
NOT_SUPPORTED = "证据不支持："
UNKNOWN = "无法确认："
MOST_LIKELY_CAUSE = "最可能的原因："
CAUSE_UNCONFIRMED = "原因尚未由证据确认"
NOTHING_FOUND = "在所查范围内未发现异常"
FOUND = "发现异常："
# What a first line of each kind opens with (the single-ReAct guard's check).
OPENINGS: dict[str, tuple[str, ...]] = {
    "yes_no": (YES, NOT_SUPPORTED, UNKNOWN),
    "why": (MOST_LIKELY_CAUSE, CAUSE_UNCONFIRMED),
    "health": (NOTHING_FOUND, FOUND, UNKNOWN),
    "what": (),
}
PART_PREFIX = "另问"  # 另问「<part>」：<the part's answer>
SAME_EVIDENCE = "依据与上一条相同"  # a part answered by the finding a line above shows
PART_OPENINGS = (YES, NOT_SUPPORTED, UNKNOWN, MOST_LIKELY_CAUSE, FOUND)
MAX_GIST_CHARS = 360  # a cause's whole chain (change, line, effect) fits: an opening never hides its effect

# A series name: snake_case, or a reading of one after a colon (`http_requests_total:error_ratio`,
# `up:targets_down`, the names the Prometheus reader gives derived series).
_IDENTIFIER = re.compile(
    r"(?<![A-Za-z0-9_:\-])([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?::[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*)?"
    r"|[A-Za-z][A-Za-z0-9]*:[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+)(?![A-Za-z0-9:\-])"
)


@dataclass(frozen=True)
class Finding:
    text: str  # the verified sentence, as checked
    cite: str  # its citation as the answer renders it (e.g. " [证据: query_logs #3 hits[1]]")
    state: str  # one of FINDING_STATES
    confirmed: bool  # the checks confirmed it (what counts as confirmed is the caller's verdict rule)
    symptoms: frozenset[str] = frozenset()
    services: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    tools: frozenset[str] = frozenset()  # the tools whose results it cites


_TOOL = re.compile(r"\b(query_[a-z]+|lookup_knowledge)\b")
_QUOTED = re.compile(r"「[^」]*」|“[^”]*”|『[^』]*』")


def finding_signals(text: str) -> tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]:
    """(symptom ids, services, metric identifiers) a sentence is about, from its own words. Metric
    identifiers are read outside quoted evidence (a quoted log line's `waited_s` is no series);
    symptoms also from the quoted text (「No space left on device」 is about the disk)."""
    metrics = tuple(dict.fromkeys(_IDENTIFIER.findall(_QUOTED.sub(" ", text))))
    symptoms = {s for metric in metrics for s in symptoms_for_metric(metric)}
    symptoms |= set(symptoms_for_log(text))
    symptoms |= set(find_symptoms(text))
    return frozenset(symptoms), tuple(extract_service_names(text, 20)), metrics


def make_finding(text: str, cite: str, state: str, confirmed: bool, tools: Iterable[str] | None = None) -> Finding:
    """A finding; `tools`: the tools it cites (else read from its rendered citation)."""
    symptoms, services, metrics = finding_signals(text)
    cited = frozenset(tools) if tools is not None else frozenset(_TOOL.findall(cite))
    return Finding(text=text, cite=cite, state=state, confirmed=confirmed, symptoms=symptoms,
                   services=services, metrics=metrics, tools=cited)


def gist(text: str) -> str:
    """The sentence without its closing mark, bounded."""
    core = " ".join(text.split()).rstrip("。.；;")
    if len(core) <= MAX_GIST_CHARS:
        return core
    # Cut between words, never inside a name, number or metric identifier (a cut name would read
    # as a name the evidence lacks).
    head = core[: MAX_GIST_CHARS - 1]
    cut = max(head.rfind(mark) for mark in " ，,；;、：:（(「")
    return (head[:cut] if cut > MAX_GIST_CHARS // 2 else head).rstrip(" ，,；;、：:") + "…"


def _line(opening: str, finding: Finding) -> str:
    return f"{opening}{gist(finding.text)}{finding.cite}"


def _specific(symptoms: tuple[str, ...]) -> set[str]:
    specific = {s for s in symptoms if not SYMPTOMS_BY_ID[s].generic}
    return specific or set(symptoms)


def _question_signals(query: str) -> tuple[set[str], set[str]]:
    """(metric identifiers, symptom ids) the question names."""
    named = {m.lower() for m in _IDENTIFIER.findall(query)}
    symptoms = tuple(find_symptoms(query))
    return named, _specific(symptoms) if symptoms else set()


def _by_question(findings: list[Finding], query: str) -> list[Finding]:
    """Findings about what the question names first (its metric names, then its symptoms)."""
    named, asked = _question_signals(query)

    def rank(finding: Finding) -> tuple[int, int]:
        return (0 if named & {m.lower() for m in finding.metrics} else 1, 0 if finding.symptoms & asked else 1)

    return sorted(findings, key=rank)  # stable: the caller's order within a rank


def first_line(intent: QuestionIntent, query: str, findings: list[Finding], verdict: str, scope: str = "",
               failed: str = "", empty: str = "") -> str:
    """The direct answer to the question. `verdict` is PASS, LOW_CONFID, REJECT (multi-agent) or
    SUCCESS (single-ReAct); `scope` says what was checked (services, window, signals). `failed`
    names the kinds of query whose backend failed (「指标查询」); `empty` says
    which checked service and window had no data, or logs of unknown level (`shared.no_data`:
    「api-gateway 在 … 没有数据（…）」). Either way nothing is denied — no 「在所查范围内未发现
    异常」, no 「证据不支持」 — the line says what failed or was empty; a confirmed abnormal finding
    is still reported."""
    if failed or empty:
        reason = "；".join(part for part in (f"{failed}失败" if failed else "", empty) if part)
        return _cannot_tell(intent, query, findings, verdict, scope, reason)
    confirmed = [f for f in findings if f.confirmed]
    abnormal = _by_question([f for f in confirmed if f.state in (ABNORMAL, CAUSE)], query)
    unconfirmed_abnormal = sum(1 for f in findings if not f.confirmed and f.state in (ABNORMAL, CAUSE))
    normal = [f for f in confirmed if f.state == NORMAL]
    rejected = verdict == "REJECT"
    scope_note = f"（{scope}）" if scope else ""

    if intent.kind == "yes_no" and intent.hypothesis_change:
        return _change_yes_no(intent, confirmed, rejected)
    if intent.kind == "yes_no":
        return _yes_no(intent, abnormal, normal, rejected)
    if intent.kind == "why":
        causes = [f for f in confirmed if f.state == CAUSE]
        if causes and not rejected:
            return _line(MOST_LIKELY_CAUSE, causes[0])
        if abnormal:
            return _line(f"{CAUSE_UNCONFIRMED}；最明显的线索：", abnormal[0])
        if normal:
            return f"{CAUSE_UNCONFIRMED}：{NOTHING_FOUND}{scope_note}"
        return f"{CAUSE_UNCONFIRMED}：本次没有可核实的检查结果"
    if intent.kind == "health":
        if abnormal:
            more = f"（另有 {len(abnormal) - 1} 项异常，见下）" if len(abnormal) > 1 else ""
            troubled = list(dict.fromkeys(f.services[0] for f in abnormal if f.services))
            if intent.triage and troubled:
                # Which services are abnormal: the subject (the first service named) of every
                # confirmed abnormal finding; a dependency its evidence mentions is not one.
                return f"{FOUND}{'、'.join(troubled)} 有已核实的异常——{gist(abnormal[0].text)}{abnormal[0].cite}{more}"
            return _line(FOUND, abnormal[0]) + more
        if normal and rejected:
            return f"{UNKNOWN}核验发现与证据不符的说法，不能据此判断所查范围内是否有异常"
        if normal:
            more = f"；另有 {unconfirmed_abnormal} 项异常说法未能核实，见【证据缺口】" if unconfirmed_abnormal else ""
            return f"{NOTHING_FOUND}{scope_note}{more}"
        return f"{UNKNOWN}本次没有可核实的检查结果"
    # 「那它的内存呢？」: a question that names a signal is answered about that signal first, abnormal
    # or not, with its reading before a cause found for it; the rest follows in the summary.
    readings_first = sorted(_about_question(abnormal, query), key=lambda f: f.state == CAUSE)
    asked = readings_first or ([] if rejected else _about_question(normal, query))
    main = asked or abnormal or [f for f in confirmed if f.state == CHANGE] or normal
    if main:
        return _line("", main[0])
    return f"{UNKNOWN}本次没有可核实的检查结果"


def part_line(part: str, answer: str) -> str:
    """The line answering one other part of a compound question."""
    return f"{PART_PREFIX}「{part}」：{answer}"


def part_lines(intent: QuestionIntent, findings: list[Finding], verdict: str, failed: str = "",
               empty: str = "", above: str = "") -> list[str]:
    """A line per other part of a compound question (`QuestionIntent.parts`), each answered by
    the decision table as if asked alone, in the order asked. A part answered by the very finding
    a line before it shows (「为什么 5xx？是不是新版本导致的？」) says so instead of saying it again."""
    said = [above]
    for part in intent.parts:
        answer = first_line(part, part.text, findings, verdict, "", failed, empty)
        shown = [f.text[:40] for f in findings if f.text[:40] in answer]
        opening = next((o for o in PART_OPENINGS if answer.startswith(o)), "")
        if shown and opening and all(any(text in line for line in said) for text in shown):
            answer = opening + SAME_EVIDENCE
        said.append(part_line(part.text, answer))
    return said[1:]


def _about_question(findings: list[Finding], query: str) -> list[Finding]:
    """The findings about a metric the question names, else about a symptom it names."""
    named, asked = _question_signals(query)
    by_name = [f for f in findings if named & {m.lower() for m in f.metrics}]
    return by_name or [f for f in findings if f.symptoms & asked]


def _yes_no(intent: QuestionIntent, abnormal: list[Finding], normal: list[Finding], rejected: bool) -> str:
    # 「A 报错，是 pay.internal 不可用的问题吗」: yes when a confirmed anomaly names that host or
    # service (the lines that fail against it), whatever else the hypothesis' words type.
    peers = list(intent.blamed)
    toward = [f for f in abnormal if any(names_service(f.text, p) for p in peers)]
    if toward and not rejected:
        return f"{YES}已核实的异常指向 {'、'.join(peers)}——{gist(toward[0].text)}{toward[0].cite}"
    typed = _entity_yes_no(intent, abnormal, normal, rejected)
    if typed is not None:
        return typed
    catalogue = configured_failure_modes()
    named = catalogue.hypothesis_in(intent.hypothesis)
    if named and all(SYMPTOMS_BY_ID[s].generic for s in intent.hypothesis_symptoms):
        # 「是不是 DNS 解析失败的问题」: the catalogue's thing is the hypothesis, not the generic
        # symptom its words also name (失败 → errors); errors alone never confirm the DNS.
        label = "、".join(dict.fromkeys(catalogue.entity_name(m.entity) or m.text for m in named))
        return f"{UNKNOWN}缺少「{label}」相关信号（指标或日志）的已核实证据"
    label = hypothesis_label(intent) or intent.hypothesis
    wanted = _specific(intent.hypothesis_symptoms) if intent.hypothesis_symptoms else set()
    if wanted:
        on_signal = [f for f in abnormal if f.symptoms & wanted]
        quiet = [f for f in normal if f.symptoms & wanted]
        if on_signal and not rejected:
            # Name the hypothesis in our words before the finding: 「是：数据库连接池有已核实的异常——…」.
            finding = on_signal[0]
            matched = [s for s in intent.hypothesis_symptoms if s in finding.symptoms] or sorted(wanted)
            what = "、".join(SYMPTOMS_BY_ID[s].label_zh for s in matched)
            return f"{YES}{what}有已核实的异常——{gist(finding.text)}{finding.cite}"
        if quiet and not on_signal and rejected:
            return f"{UNKNOWN}核验未通过，不能据此确认或否定「{label}」"
        if quiet and not on_signal:
            finding = quiet[0]
            signal = finding.metrics[0] if finding.metrics else label
            return f"{NOT_SUPPORTED}没有证据显示「{label}」（{signal} 正常：{gist(finding.text)}）{finding.cite}"
        if on_signal:  # REJECT: the abnormal finding is not enough to say yes
            return f"{UNKNOWN}核验未通过，不能据此确认「{label}」"
        return f"{UNKNOWN}缺少「{label}」相关信号（指标或日志）的已核实证据"
    # A hypothesis that links services: yes only when one confirmed finding names them together.
    services = set(intent.subject_services) | set(intent.hypothesis_services)
    names = "、".join(dict.fromkeys(list(intent.subject_services) + list(intent.hypothesis_services)))
    linked = [f for f in abnormal if len(set(f.services) & services) >= 2]
    if linked and not rejected:
        return _line(YES, linked[0])
    troubled = [s for s in dict.fromkeys(list(intent.subject_services) + list(intent.hypothesis_services))
                if any(s in f.services for f in abnormal)]
    if len(troubled) >= 2:
        return f"{UNKNOWN}{names} 都有已核实的异常，但证据没有显示二者之间的关联"
    return f"{UNKNOWN}缺少能把 {names} 联系起来的已核实证据"


def _entity_yes_no(intent: QuestionIntent, abnormal: list[Finding], normal: list[Finding], rejected: bool) -> str | None:
    """A hypothesis about a thing the failure-mode catalogue types (a database connection pool, a
    thread pool and a Redis pool are different things): 是 only on a finding about that same
    thing; 证据不支持 when its own signal is quiet or the findings show another mechanism (named:
    实际…); None when the catalogue types neither the hypothesis nor any finding (the symptom
    rule decides)."""
    catalogue = configured_failure_modes()
    asked = {mention.entity: mention for mention in catalogue.hypothesis_in(intent.hypothesis)}
    if not asked:
        return None
    label = "、".join(dict.fromkeys(catalogue.entity_name(entity) or mention.text for entity, mention in asked.items()))
    typed = [(f, catalogue.entities_in(f.text, f.metrics)) for f in abnormal]
    supporting = [f for f, entities in typed if set(entities) & set(asked)]
    # A finding whose own words name the thing (a crash's `panic:` line) shows it better than a
    # series the catalogue types as that thing (the restart count).
    # The words the hypothesis used (`panic`), when a finding quotes them, first of all.
    said = [mention.text.lower() for mention in asked.values()]
    supporting.sort(key=lambda f: (not any(word in f.text.lower() for word in said),
                                   not {m.entity for m in catalogue.line_mentions(f.text)} & set(asked)))
    if supporting and not rejected:
        return f"{YES}{label}有已核实的异常——{gist(supporting[0].text)}{supporting[0].cite}"
    if supporting:
        return f"{UNKNOWN}核验未通过，不能据此确认「{label}」"
    typed_normal = [(f, catalogue.entities_in(f.text, f.metrics)) for f in normal]
    if not any(entities for _, entities in typed + typed_normal):
        return None  # nothing the catalogue can type: the symptom rule decides
    quiet = [f for f, entities in typed_normal if set(entities) & set(asked)]
    other = [(f, entities) for f, entities in typed if entities]
    if rejected:
        return f"{UNKNOWN}核验未通过，不能据此确认或否定「{label}」"
    if other:
        finding, entities = other[0]
        actual = "、".join(dict.fromkeys(entities.values()))
        return f"{NOT_SUPPORTED}没有证据显示「{label}」有问题（实际：{actual}——{gist(finding.text)}）{finding.cite}"
    if quiet:
        finding = quiet[0]
        signal = finding.metrics[0] if finding.metrics else label
        return f"{NOT_SUPPORTED}没有证据显示「{label}」有问题（{signal} 正常：{gist(finding.text)}）{finding.cite}"
    return f"{UNKNOWN}缺少「{label}」相关信号（指标或日志）的已核实证据"


# The kind a change finding states (「… 在 <time> 的 deploy 变更」, 「… 有一次 config 变更」: ours).
_STATED_KIND = re.compile(r"(?:的|一次) ([A-Za-z_]+) 变更")
_RELEASE_KINDS = frozenset({"deploy", "release", "rollout", "upgrade", "canary"})
_CONFIG_KINDS = frozenset({"config", "configuration", "flag", "feature_flag"})
_MIGRATION_KINDS = frozenset({"migration", "db_migration", "schema", "schema_change", "ddl"})


def _change_kind(text: str) -> str:
    """"release", "config", "migration" or "" (unknown) for the change a finding states."""
    found = _STATED_KIND.search(text)
    kind = found.group(1).lower() if found else ""
    for name, kinds in (("release", _RELEASE_KINDS), ("config", _CONFIG_KINDS), ("migration", _MIGRATION_KINDS)):
        if kind in kinds:
            return name
    return ""


def _from_changes(finding: Finding) -> bool:
    """A finding that cites the change records."""
    return "query_changes" in finding.tools


def _change_yes_no(intent: QuestionIntent, confirmed: list[Finding], rejected: bool) -> str:
    """「是不是新版本/配置变更导致的」: answered about the change. A cause the link check tied to a
    change → 是; a change in the checked time with no link found → 无法确认, naming it; a change
    search that found nothing → 证据不支持; else 无法确认 for want of the change records."""
    label = intent.hypothesis
    linked = [f for f in confirmed if f.state == CAUSE and _from_changes(f)]
    asked = intent.change_kind
    other_kind = [f for f in linked if asked and _change_kind(f.text) not in ("", asked)]
    linked = [f for f in linked if f not in other_kind]
    if other_kind and not linked and not rejected:
        # 「是不是配置变更导致的」 when a release is what the evidence links: not the change asked about.
        return f"{NOT_SUPPORTED}没有证据显示「{label}」（实际：{gist(other_kind[0].text)}）{other_kind[0].cite}"
    if linked and not rejected:
        return _line(YES, linked[0])
    if linked:
        return f"{UNKNOWN}核验未通过，不能据此确认「{label}」"
    changes = [f for f in confirmed if f.state == CHANGE]
    if changes:
        return (f"{UNKNOWN}所查时间内有变更——{gist(changes[0].text)}{changes[0].cite}；"
                f"但证据没有显示它与异常之间的关联")
    none_found = [f for f in confirmed if f.state == NORMAL and _from_changes(f)]
    if none_found and not rejected:
        return f"{NOT_SUPPORTED}没有证据显示「{label}」（{gist(none_found[0].text)}）{none_found[0].cite}"
    return f"{UNKNOWN}缺少变更记录的已核实证据，不能确认或否定「{label}」"


def _cannot_tell(intent: QuestionIntent, query: str, findings: list[Finding], verdict: str, scope: str,
                 reason: str) -> str:
    """The first line when a query failed or a checked scope was empty (`reason` says which): what
    the evidence confirms as abnormal, else 无法确认 with the reason."""
    line = first_line(intent, query, findings, verdict, scope)
    denies = NOTHING_FOUND in line or line.startswith((NOT_SUPPORTED, UNKNOWN)) or CAUSE_UNCONFIRMED + "：" in line
    if intent.kind == "what" and not any(f.confirmed and f.state in (ABNORMAL, CAUSE, CHANGE) for f in findings):
        denies = True
    if not denies:
        return line
    if intent.kind == "why":
        return f"{CAUSE_UNCONFIRMED}：{reason}，不能据此判断是否有异常"
    if intent.kind == "yes_no":
        label = hypothesis_label(intent) or intent.hypothesis
        return f"{UNKNOWN}{reason}，不能据此确认或否定「{label}」" if label else f"{UNKNOWN}{reason}"
    return f"{UNKNOWN}{reason}，不能据此判断所查范围内是否有异常"
