"""What kind of answer a question asks for, read deterministically from its wording.

`classify_question` is the one reading of a question, made once per run: by the planner servicer
(multi-agent), which records it on the Plan, and by the gateway (single-ReAct), which sends it
with RunAgent. It is a typed record (`shared.core.contracts.QuestionIntent`, on the wire
`attest.common.v1.QuestionIntent`); the executor, the composer and the answer guard take it and
never read the question again, so that the first line of every answer answers the question the
user asked:

- `why`: an explanation is asked for (为什么, 原因, why …) — the first line names the most likely
  cause that the evidence links, or says that the cause is not confirmed and gives the strongest
  lead;
- `health`: "is X all right / anything wrong" (正常吗, 有没有异常, 有报错吗, healthy …) — either
  no anomaly in the checked scope, or the anomalies found;
- `yes_no`: a hypothesis to confirm (是不是磁盘满了, 是数据库连接池的问题吗) — 是 / 证据不支持 /
  无法确认, by the decision table of `shared/core/direct_answer.py`;
- `what`: anything else (what do the error logs say, what changed) — the first line is the main
  finding.

A triage question (「现在线上哪个服务有问题？」「哪些服务不正常」「which service is broken right now」)
names no service and asks which services are abnormal: it is a `health` question with `triage`
set. The executor then checks the services of its catalogue (up to a bound) instead of refusing
the question for want of a service; a question without a service that is not one (「为什么报错？」)
still names nothing to check.

A question that asks to confirm something (是不是, 有没有, …吗; never one that asks why) is
marked `confirmation`: the executor keeps its answer narrow, as the graph spec requires.

The hypothesis is the clause that carries the yes/no marker; its signals are the symptom ids of
the shared lexicon it names, and the catalogued-looking service names it names other than the
question's subject. Nothing here knows an estate.
"""

from __future__ import annotations

import re

from shared.config import configured_failure_modes, configured_signal_semantics
from shared.core.contracts import Plan, QuestionIntent
from shared.core.service_mentions import extract_service_names, plain_word_mentions
from shared.core.signal_semantics import stated_directions
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, by_specificity, find_symptoms

_WHY = re.compile(r"为什么|为何|什么原因|原因是|原因|怎么回事|咋回事|根因|\bwhy\b|root cause|what caused", re.I)
_HEALTH = re.compile(
    r"正常吗|正常么|是否正常|正不正常|健康吗|健康么|是否健康|还好吗|怎么样|如何了|状态如何|情况如何|"
    r"有没有(?:什么)?(?:异常|问题|报错|错误|告警|故障)|有(?:什么|哪些)?(?:异常|问题|报错|错误|告警|故障)(?:吗|么|没有|\?|？|$)|"
    r"有什么异常|巡检|体检|(?:看一下|看看|查一下|查看|检查一下|帮我看看|帮忙看看).{0,40}?的?(?:情况|状态)|"
    r"\bhealthy\b|\bhealth\b|\bany (?:errors?|issues?|problems?|anomal\w*)\b|\bis .* ok\b|\bstatus\b",
    re.I,
)
# The clause that asks to confirm something; its symptoms are the hypothesis.
_YES_NO_MARK = re.compile(
    r"是不是|是否|是因为|是由|由.*(?:引起|导致)|(?:的)?问题吗|吗[?？]?\s*$|(?<!什)么[?？]?\s*$|"
    r"\bis it\b|\bis this\b|\bcaused by\b|\bdue to\b|^\s*(?:is|are|did|does|has|was)\b",
    re.I,
)
# The A-not-A question (高不高, 满没满, 有没有 OOM) and 「满了没有」 ask yes or no too.
_A_NOT_A = re.compile(r"([\u4e00-\u9fff])[不没]\1|了没有?\s*$")
# Where the hypothesis starts inside its clause: 「X 报错是不是因为磁盘满了」 asks about the disk.
_HYPOTHESIS_START = re.compile(r"是不是|是否|是")
_CLAUSE_SPLIT = re.compile(r"[，,。；;！!?？\n]+")
# What closes one question of several (「…吗？…高不高？」).
_QUESTION_END = re.compile(r"[?？]+")
MAX_PART_CHARS = 60  # a longer "question" is no part: the answer quotes each part
# Words that make a hypothesis one about a cause (导致, 引起, 的问题 …).
_CAUSAL = re.compile(r"导致|引起|引发|造成|因为|由于|问题|原因|搞的|害的|\bcaus\w*|\bdue to\b|\bbecause\b|\bresult\w*|\bbroke\b", re.I)
# A hypothesis that a change caused it (「是不是新版本发布导致的」「是配置变更引起的吗」): answered about the
# change — a change linked to the anomaly, a change with no link found, or no change recorded.
_CHANGE_HYPOTHESIS = re.compile(
    r"新版本|发版|发布|上线|版本|变更|改了?配置|配置(?:改动|修改|调整)|部署|升级|迁移|表结构|"
    r"\bmigrat\w*|\bschema\s+change\w*|\bddl\b|"
    r"\bdeploy\w*|\breleas\w*|\brollout\b|\bconfig(?:uration)?\s+change\w*|\bupgrad\w*",
    re.I,
)
# Triage: which of the services (哪个服务, which services …) is abnormal, or is anything abnormal in
# the whole estate (线上, 生产, in production …). Read only when the question names no service.
_ABNORMAL_ZH = r"(?:有问题|出了?问题|有异常|异常|不正常|不健康|报错|出了?错|故障|挂了|挂掉|宕机|告警|有毛病|不对劲)"
_TRIAGE_ZH = re.compile(
    r"(?:哪个|哪些|哪一个|什么|哪|有没有|有无)(?:服务|应用|系统|组件|模块)[^，,。；;！!?？]{0,12}?" + _ABNORMAL_ZH
    + r"|(?:线上|生产|现网|全站|全局|整体|所有服务|全部服务|各个?服务|服务们)[^，,。；;！!?？]{0,12}?"
    + r"(?:有(?:什么|哪些|没有|无)?(?:什么)?" + _ABNORMAL_ZH + r"|" + _ABNORMAL_ZH + r"(?:吗|么|没有|\?|？|$))"
    + r"|巡检(?:一下)?(?:线上|生产|所有|全部|各个?)(?:的)?服务|(?:线上|生产|所有|全部)服务(?:的)?巡检"
)
_TRIAGE_EN = re.compile(
    r"\b(?:which|what|any)\s+(?:of\s+(?:the|our)\s+)?(?:services?|apps?|applications?|systems?|components?)\b"
    r".{0,40}?\b(?:broken|down|failing|failed|unhealthy|abnormal|erroring|wrong|problems?|issues?|errors?|"
    r"anomal\w*|degraded|on fire|sick)\b"
    r"|\b(?:anything|something|what(?:'s| is))\s+(?:\w+\s+)?(?:broken|wrong|failing|down|abnormal)\b"
    r".{0,20}?\b(?:in\s+)?(?:prod(?:uction)?|live|the estate|right now|now|currently)\b",
    re.I,
)


def is_triage(query: str) -> bool:
    """The question names no service and asks which services are abnormal."""
    text = " ".join(query.split())
    if extract_service_names(text, 1) or _WHY.search(text):
        return False
    return bool(_TRIAGE_ZH.search(text) or _TRIAGE_EN.search(text))


def hypothesis_label(intent: QuestionIntent) -> str:
    """The hypothesis in our words: its symptoms' labels, else the services it names, else the
    clause itself."""
    if intent.hypothesis_symptoms:
        return "、".join(SYMPTOMS_BY_ID[s].label_zh for s in intent.hypothesis_symptoms)
    if intent.hypothesis_services:
        return "、".join(intent.hypothesis_services)
    return intent.hypothesis


# A host name a hypothesis can blame (`db-1.prod.example.com`, `pay.internal`): dotted words with
# a letter-led last label, which a version (`v1.2.3`) or a file name is not.
_HOST = re.compile(r"(?<![A-Za-z0-9_.\-/])([a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)+)(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])")
_FILE_SUFFIX = re.compile(r"\.(?:py|js|ts|go|java|log|txt|json|ya?ml|conf|cfg|ini|sql|sh|md|csv|xml|html?)$")


def _is_host(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last[:1].isalpha() and len(last) >= 2 and not _FILE_SUFFIX.search(name)


def _blamed(asked: str, text: str, others: tuple[str, ...], words: bool = True) -> tuple[str, ...]:
    """The hosts and services a hypothesis blames: the ones it names, and single words of it that
    could name a service (`plain_word_mentions`: `redis`, `ledger`) that the question does not
    also name outside the hypothesis (its subject), and that neither the catalogue nor the
    symptom lexicon reads as a failure (`timeout`, `oom`). Only evidence that names one makes it
    blamed in an answer (`shared.core.direct_answer`)."""
    lowered = asked.lower()
    named = [s for s in others if s.lower() in lowered]
    outside = text.replace(asked, " ").lower()
    single = [w for w in plain_word_mentions(asked) if words
              and not re.search(rf"(?<![a-z0-9_.\-]){re.escape(w)}(?![a-z0-9_\-])", outside)
              and not configured_failure_modes().hypothesis_in(w) and not find_symptoms(w)]
    return tuple(dict.fromkeys(named + single))


def _clauses(query: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT.split(query) if c.strip()]


_RELEASE_WORDS = re.compile(r"新版本|发版|发布|上线|版本|部署|升级|\bdeploy\w*|\breleas\w*|\brollout\b|\bupgrad\w*", re.I)
_CONFIG_WORDS = re.compile(r"配置|开关|参数|\bconfig\w*|\bflag\b|\bsetting\w*", re.I)
_MIGRATION_WORDS = re.compile(r"迁移|表结构|\bmigrat\w*|\bschema\b|\bddl\b", re.I)


def change_kind_named(hypothesis: str) -> str:
    """Which kind of change a change hypothesis names: "release", "config", "migration" (a
    database schema change), or "" (any)."""
    if _MIGRATION_WORDS.search(hypothesis):
        return "migration"
    release, config = _RELEASE_WORDS.search(hypothesis), _CONFIG_WORDS.search(hypothesis)
    if release and not config:
        return "release"
    if config and not release:
        return "config"
    return ""


def names_change(hypothesis: str) -> bool:
    """Whether a yes/no hypothesis is that a change (a release, a config change) caused it: it
    names a change and a cause (「是不是新版本导致的」「是发布的问题吗」), not 「最近有变更吗」."""
    return _CHANGE_HYPOTHESIS.search(hypothesis) is not None and _CAUSAL.search(hypothesis) is not None


def _reading(intent: QuestionIntent) -> QuestionIntent:
    """What an intent reads, whatever words asked it (two parts that read the same are one)."""
    return intent.model_copy(update={"text": "", "confirmation": False})


# A question that asks to confirm something (是不是, 有没有, …吗): its answer stays narrow, as the
# graph spec requires of the executor. One that asks why (`_WHY`) never is, even when it ends with 吗.
_CONFIRMATION = re.compile(
    r"是不是|是否|真的吗|是真的|确认|有没有|有无|吗[?？]?\s*$|\bconfirm\b|\bis it (?:true|real)\b|\breally\b|"
    r"^\s*(?:is|are|did|does|has)\b"
)


def _confirms(text: str) -> bool:
    lowered = text.lower().strip()
    return _WHY.search(lowered) is None and _CONFIRMATION.search(lowered) is not None


def _asks(clause: str) -> bool:
    """Whether a clause is a question of its own (not a premise such as 「报错很多」)."""
    return any(p.search(clause) for p in (_WHY, _HEALTH, _YES_NO_MARK, _A_NOT_A))


def question_parts(query: str) -> tuple[str, ...]:
    """A compound question's sub-questions (「连接池耗尽了吗？CPU 高不高？」, 「为什么 5xx？是不是新版本
    导致的？」), in the order asked, each standalone. A part is what a question mark closes (a
    premise before it in the same sentence goes with it) and asks something of its own; a part
    that names no service is asked about the question's services. Only parts answered on their
    own count (why and yes/no; a 「影响大吗」 with nothing to confirm is no part), and a question
    with a health part is one health question (its checked scope answers the others). The answer quotes each other part, so text that no
    question mark closes (an instruction) is never one, nor a part over MAX_PART_CHARS. () when
    one thing is asked."""
    text = " ".join(query.split())
    pieces = [p.strip(" ，,。；;！!") for p in _QUESTION_END.split(text)]
    closed = [p for p in pieces[:-1] if p]
    if len(closed) < 2 or any(len(p) > MAX_PART_CHARS or not _asks(p) for p in closed):
        return ()
    services = extract_service_names(text, 20)
    parts: list[str] = []
    kinds: list[str] = []
    for piece in closed:
        part = piece if extract_service_names(piece, 20) or not services else f"{' 和 '.join(services)} {piece}"
        intent = _classify(part)
        if intent.kind != "what" and _reading(intent) not in (_reading(_classify(p)) for p in parts):
            parts.append(part)
            kinds.append(intent.kind)
    if len(parts) < 2 or "health" in kinds:
        return ()  # 「正常吗？有没有积压？」: a health check, whose scope answers the rest
    return tuple(parts)


def classify_question(query: str) -> QuestionIntent:
    """The question's kind and, for a yes/no question, its hypothesis. A compound question is read
    by its first part; its other parts ride along, each read on its own (`QuestionIntent.parts`).
    This is the one reading of a question: the planner (multi-agent) or the gateway (single-ReAct)
    calls it once per run, and every later step takes the record it returns."""
    text = " ".join(query.split())
    stated = stated_directions(text, configured_signal_semantics())
    parts = question_parts(text)
    if parts:
        return _classify(parts[0]).model_copy(update={
            "parts": tuple(_classify(part) for part in parts[1:]), "confirmation": _confirms(text),
            "stated_directions": stated})
    return _classify(text).model_copy(update={"stated_directions": stated})


def plan_intent(plan: Plan, query: str) -> QuestionIntent:
    """The plan's reading of `query`; a plan that carries none (one built without the planner
    service) has the query read here."""
    return plan.intent if plan.intent is not None else classify_question(query)


# Two names joined as one list (「A 和 B」「A、B」): when one is a service, so is a one-word other.
_JOINED = re.compile(r"(?<![\w.-])([A-Za-z0-9][\w.-]*)\s*(?:和|与|跟|及|以及|、|,|，|and)\s*([A-Za-z0-9][\w.-]*)(?![\w.-])", re.ASCII)


def _named_services(text: str) -> tuple[str, ...]:
    """The services a question names: the identifier-shaped ones, and a one word joined to one of
    them (「trath-service 和 zulkerstai 的报错是同一个问题吗」)."""
    services = extract_service_names(text, 20)
    words = set(plain_word_mentions(text))
    for match in _JOINED.finditer(text):
        a, b = match.group(1).lower(), match.group(2).lower()
        for name, other in ((a, b), (b, a)):
            if name in services and other in words and other not in services:
                services.append(other)
    return tuple(services)


def _classify(query: str) -> QuestionIntent:
    text = " ".join(query.split())
    services = _named_services(text)
    read = QuestionIntent(text=text, subject_services=services, confirmation=_confirms(text))
    if _WHY.search(text):
        return read.model_copy(update={"kind": "why"})
    if not services and is_triage(text):
        return read.model_copy(update={"kind": "health", "triage": True})
    clauses = _clauses(text) or [text]
    for clause in clauses:
        # A health question is one even when another clause names a symptom (「正常吗？有没有积压？」).
        if _HEALTH.search(clause):
            return read.model_copy(update={"kind": "health"})
    # The last clause that carries a yes/no marker is the hypothesis (「报错很多，是连接池的问题吗？」).
    for clause in reversed(clauses):
        if not (_YES_NO_MARK.search(clause) or _A_NOT_A.search(clause)):
            continue
        start = _HYPOTHESIS_START.search(clause)
        asked = clause[start.start():] if start else clause
        symptoms = tuple(by_specificity(find_symptoms(asked)))
        named = extract_service_names(asked, 20) + [h for h in _HOST.findall(asked) if _is_host(h)]
        # The subject is a service the question names outside the hypothesis (「A 报错，是 B 挂了
        # 吗」asks about B as A's cause); a hypothesis naming the only service names the subject.
        outside = extract_service_names(text.replace(asked, " "), 20)
        subject = outside[0] if outside else (services[0] if services and services[0] not in named else "")
        others = tuple(dict.fromkeys(s for s in named if s != subject and s not in outside))
        if not outside and len(named) == 1 and clause == clauses[0]:
            others = ()  # 「checkout-api 是不是挂了」: the one service is the subject
        if not symptoms and not others and len(services) > 1:
            # 「A 和 B 的错误是同一个问题吗？」: the hypothesis links the services the question names.
            others = services[1:]
        change = names_change(asked)
        # A thing the failure-mode catalogue types (线程池, Redis 连接池, 证书 …) is a hypothesis too.
        typed = bool(configured_failure_modes().hypothesis_in(asked))
        # Single words count only in a hypothesis set off by its marker (「…，是不是 redis 挂了」):
        # without one the clause is the whole question and its first word the subject.
        blamed = _blamed(asked, text, others, words=start is not None)
        if symptoms or others or change or typed or blamed:
            return read.model_copy(update={
                "kind": "yes_no", "hypothesis": asked, "hypothesis_symptoms": symptoms, "hypothesis_services": others,
                "hypothesis_change": change, "change_kind": change_kind_named(asked), "blamed": blamed,
            })
    return read
