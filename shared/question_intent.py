"""What kind of answer a question asks for, read deterministically from its wording (issue 15).

The planner records the result on the Plan; the composer (multi-agent) and the single-ReAct
answer guard read the same result, so that the first line of every answer answers the question
the user asked:

- `why`: an explanation is asked for (为什么, 原因, why …) — the first line names the most likely
  cause that the evidence links, or says that the cause is not confirmed and gives the strongest
  lead;
- `health`: "is X all right / anything wrong" (正常吗, 有没有异常, 有报错吗, healthy …) — either
  no anomaly in the checked scope, or the anomalies found;
- `yes_no`: a hypothesis to confirm (是不是磁盘满了, 是数据库连接池的问题吗) — 是 / 证据不支持 /
  无法确认, by the decision table of `shared/direct_answer.py`;
- `what`: anything else (what do the error logs say, what changed) — the first line is the main
  finding.

The hypothesis is the clause that carries the yes/no marker; its signals are the symptom ids of
the shared lexicon it names, and the catalogued-looking service names it names other than the
question's subject. Nothing here knows an estate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, by_specificity, find_symptoms
from shared.service_mentions import extract_service_names

QUESTION_KINDS = ("why", "health", "yes_no", "what")

_WHY = re.compile(r"为什么|为何|什么原因|原因是|原因|怎么回事|咋回事|根因|\bwhy\b|root cause|what caused", re.I)
_HEALTH = re.compile(
    r"正常吗|正常么|是否正常|正不正常|健康吗|健康么|是否健康|还好吗|怎么样|如何了|状态如何|情况如何|"
    r"有没有(?:什么)?(?:异常|问题|报错|错误|告警|故障)|有(?:什么|哪些)?(?:异常|问题|报错|错误|告警|故障)(?:吗|么|没有|\?|？|$)|"
    r"有什么异常|巡检|体检|"
    r"\bhealthy\b|\bhealth\b|\bany (?:errors?|issues?|problems?|anomal\w*)\b|\bis .* ok\b|\bstatus\b",
    re.I,
)
# The clause that asks to confirm something; its symptoms are the hypothesis.
_YES_NO_MARK = re.compile(
    r"是不是|是否|是因为|是由|由.*(?:引起|导致)|(?:的)?问题吗|吗[?？]?\s*$|(?<!什)么[?？]?\s*$|"
    r"\bis it\b|\bis this\b|\bcaused by\b|\bdue to\b|^\s*(?:is|are|did|does|has|was)\b",
    re.I,
)
# Where the hypothesis starts inside its clause: 「X 报错是不是因为磁盘满了」 asks about the disk.
_HYPOTHESIS_START = re.compile(r"是不是|是否|是")
_CLAUSE_SPLIT = re.compile(r"[，,。；;！!?？\n]+")


@dataclass(frozen=True)
class QuestionIntent:
    kind: str  # one of QUESTION_KINDS
    hypothesis: str = ""  # the yes/no clause as the user wrote it (yes_no only)
    hypothesis_symptoms: tuple[str, ...] = ()  # symptom ids the hypothesis names, most specific first
    hypothesis_services: tuple[str, ...] = ()  # services the hypothesis names besides the subject
    subject_services: tuple[str, ...] = field(default=())

    @property
    def hypothesis_label(self) -> str:
        """The hypothesis in our words: its symptoms' labels, else the clause itself."""
        if self.hypothesis_symptoms:
            return "、".join(SYMPTOMS_BY_ID[s].label_zh for s in self.hypothesis_symptoms)
        if self.hypothesis_services:
            return "、".join(self.hypothesis_services)
        return self.hypothesis


def _clauses(query: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT.split(query) if c.strip()]


def classify_question(query: str) -> QuestionIntent:
    """The question's kind and, for a yes/no question, its hypothesis."""
    text = " ".join(query.split())
    services = tuple(extract_service_names(text, 20))
    if _WHY.search(text):
        return QuestionIntent("why", subject_services=services)
    clauses = _clauses(text) or [text]
    for clause in clauses:
        # A health question is one even when another clause names a symptom (「正常吗？有没有积压？」).
        if _HEALTH.search(clause):
            return QuestionIntent("health", subject_services=services)
    # The last clause that carries a yes/no marker is the hypothesis (「报错很多，是连接池的问题吗？」).
    for clause in reversed(clauses):
        if not _YES_NO_MARK.search(clause):
            continue
        start = _HYPOTHESIS_START.search(clause)
        asked = clause[start.start():] if start else clause
        symptoms = tuple(by_specificity(find_symptoms(asked)))
        named = extract_service_names(asked, 20)
        subject = services[0] if services else ""
        others = tuple(s for s in named if s != subject)
        if not symptoms and not others and len(services) > 1:
            # 「A 和 B 的错误是同一个问题吗？」: the hypothesis links the services the question names.
            others = services[1:]
        if symptoms or others:
            return QuestionIntent(
                "yes_no", hypothesis=asked, hypothesis_symptoms=symptoms, hypothesis_services=others,
                subject_services=services,
            )
    return QuestionIntent("what", subject_services=services)
