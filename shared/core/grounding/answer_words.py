"""The fixed words of the direct answer's first line (`shared/core/direct_answer.py`), blanked before
a conclusion's statement checks.

They are our template's words, not the model's assertions: 「都有已核实的异常，但证据没有显示二者之间
的关联」 is no universal statement about the evidence, 「另有 2 项异常」 counts our own findings, and
「没有证据显示「磁盘」」 names what was asked. What the line asserts — that its opening agrees with
the Analyses' evidence — is checked by the single-ReAct answer guard (`gateway/answer_guard.py`)
from the verified snapshot. Only the exact template fragments are blanked; the findings they
quote (names, numbers, times) stay and are checked as before. 「在所查范围内未发现异常」 is not
blanked: `statement_check` gives it its own rule (nothing it cites shows an ERROR line).
"""

from __future__ import annotations

import re

from shared.config import configured_failure_modes
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID

# A hypothesis label is our lexicon's words: a symptom's own label (「错误/5xx」, 「CPU 使用率」), or
# CJK only — a label with other names or numbers is not blanked, so they are checked like any other.
# The failure-mode catalogue's names of things and of failures (「Redis 连接池」, 「线程池耗尽」) are ours too.
_CATALOGUE = configured_failure_modes()
_NAMES = {s.label_zh for s in SYMPTOMS_BY_ID.values()} | {
    name for m in _CATALOGUE.mechanisms
    for name in (m.name_zh, m.thing_zh, *(v.name_zh for v in m.variants), *(v.thing_zh for v in m.variants)) if name
}
_LEXICON_LABEL = "|".join(sorted((re.escape(name) for name in _NAMES), key=len, reverse=True))
_LABEL = rf"(?:(?:{_LEXICON_LABEL})(?:、(?:{_LEXICON_LABEL}))*|[\u4e00-\u9fff、]{{1,20}})"
# The kinds of query that failed (`shared.failed_calls.failure_summary`: 「日志查询、指标查询」).
_FAILED = r"[\u4e00-\u9fff、]{2,40}查询失败"
_FRAGMENTS = (
    # A failed evidence call (`direct_answer._cannot_tell`), before the
    # shorter openings below that these begin with.
    rf"^无法确认：{_FAILED}(?:，不能据此(?:确认或否定「{_LABEL}」|判断所查范围内是否有异常))?",
    rf"^原因尚未由证据确认：{_FAILED}，不能据此判断是否有异常",
    rf"^是：{_LABEL}有已核实的异常——",
    # A blamed host or service (「是：已核实的异常指向 pay.internal——…」): the names stay and are checked.
    r"^是：已核实的异常指向 ",
    r"(?<=[A-Za-z0-9])——",
    # A triage's line (「发现异常：a、b 有已核实的异常——…」): the service names stay and are checked.
    r"(?<=[A-Za-z0-9]) 有已核实的异常——",
    rf"^证据不支持：没有证据显示「{_LABEL}」(?:有问题)?(?:（实际：(?:{_LABEL}——)?)?",
    # A change hypothesis (「是不是新版本导致的」) answered about the change.
    r"^无法确认：所查时间内有变更——",
    r"；但证据没有显示它与异常之间的关联",
    rf"^无法确认：缺少变更记录的已核实证据，不能确认或否定「{_LABEL}」",
    r"（[A-Za-z0-9_.:\-]{1,80} 正常：",
    rf"^无法确认：缺少「{_LABEL}」相关信号（指标或日志）的已核实证据",
    rf"^无法确认：核验未通过，不能据此确认(?:或否定)?「{_LABEL}」",
    r"^无法确认：本次没有可核实的检查结果",
    r"^无法确认：核验发现与证据不符的说法，不能据此判断所查范围内是否有异常",
    r"都有已核实的异常，但证据没有显示二者之间的关联",
    r"^无法确认：缺少能把 ",
    r" 联系起来的已核实证据",
    r"（另有 \d+ 项异常，见下）",
    r"；另有 \d+ 项异常说法未能核实，见【证据缺口】",
    r"^原因尚未由证据确认(?:；最明显的线索：|：本次没有可核实的检查结果|：)",
    r"(?<=：)依据与上一条相同",
)
# A compound question's other parts are answered a line each, 「另问「<part>」：<the same openings>」
# (`shared.core.direct_answer.part_line`); the part is the user's own question, and the single-ReAct
# answer guard refuses a line whose part the question did not ask.
_PART = "(?:另问「[^」\n]{1,160}」：)?"
_TEMPLATE = re.compile("|".join([*(f.replace("^", "^" + _PART, 1) if f.startswith("^") else f for f in _FRAGMENTS),
                                 _PART.replace(")?", ")").replace("(?:", "^(?:", 1)]), re.M)


def blank_answer_words(text: str) -> str:
    """The conclusion with the answer line's template fragments replaced by spaces."""
    return _TEMPLATE.sub(lambda m: " " * len(m.group(0)), text.strip())
