"""What a sentence says about certainty and polarity: hedges, statements of absence or health,
universal statements, excluded causes and asserted causes.

Each reader works on `number_words.normalise(text)` and returns spans into it. The readers only
find the statements; whether the evidence supports them is decided by the checks that use them
(`polarity.negation`, `polarity.absolute`, `polarity.exclusion`, `causal.unhedged`).

Decisions:
- Hedges are tokens (jieba words for Chinese, whole words for English), so 可能 counts and the
  可能 inside 不可能 does not: jieba cuts 不可能 into 不 / 可能, so the strong negations
  (不可能, 绝不可能, 毫无可能, 没有可能, 不会) are taken out before hedges are looked for. 不太可能
  (one jieba word, "unlikely") states a low probability, not a certainty, and IS a hedge; so are
  the double negations 不无可能, 不是不可能, 并非不可能 ("not impossible").
- 不排除 / 无法排除 (cannot exclude) are hedges, never exclusions.
- An exclusion (与 X 无关, 不是 X 导致的) is never a causal assertion, even though it contains a
  causal word.
- 与-forms (A 与 B 无关) are symmetric: the candidate is the side after 与, and `other` the side
  before it; a check must treat both as candidates.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from shared.core.grounding.key_terms import CJK_RUN, segment
from shared.core.grounding.number_words import find_word_quantities, normalise
from shared.text_scan import alternation, per_text_cache

# Every reader below is a pure function of its text, asked several times per statement (a
# statement's exclusions are read by statement_check, find_negations and find_causal; each claim is
# grounded twice): the results are kept per text (`per_text_cache`), as tuples of frozen values, and
# every caller gets a list of its own.
_CACHED_TEXTS = 2048
_MAX_CACHED_CHARS = 2000

# Clause breaks: Chinese and ASCII punctuation; a full stop only before a space or the end, so that
# db-01.prod and 93.5 stay whole.
_BREAK = r"，。；;,!?！？\n"
_CLAUSE_BREAK = re.compile(rf"[{_BREAK}]|\.(?=\s|$)")
_C = rf"(?:(?![{_BREAK}]|\.(?:\s|$)).)"  # one character of the same clause


def _clause_start(text: str, position: int) -> int:
    breaks = list(_CLAUSE_BREAK.finditer(text, 0, position))
    return breaks[-1].end() if breaks else 0


def _clause_end(text: str, position: int) -> int:
    m = _CLAUSE_BREAK.search(text, position)
    return m.start() if m else len(text)


# --- hedges ----------------------------------------------------------------------------------------

HEDGES_CJK: tuple[str, ...] = (
    "可能", "很可能", "有可能", "较可能", "极可能", "也可能", "可能性", "不太可能", "也许", "或许", "疑似", "推测", "怀疑",
    "嫌疑", "大概", "大概率", "不排除", "无法排除", "不能排除", "待确认", "有待", "有待确认", "尚待确认", "需确认",
    "需进一步确认", "需要进一步确认", "待进一步确认", "倾向于", "似乎", "好像", "看起来", "估计", "猜测", "初步判断",
    "初步认为", "不确定", "尚不确定", "无法确认", "尚不能确认", "不能确定", "无法确定", "不一定", "未必",
    "不无可能", "不是不可能", "并非不可能", "未必不可能",
)
"""Chinese words that present a statement as possible rather than established. An entry counts
only when it starts and ends on jieba word boundaries (one token or a run of tokens: 倾向于 =
倾向 + 于), so the 可能 of 不可能 (taken out first, see STRONG_NEGATIONS) and of 功能 never does.
不太可能 and the double negations (不无可能, 不是不可能 …) are hedges."""

HEDGES_ASCII: tuple[str, ...] = (
    "may", "might", "possibly", "possible", "likely", "unlikely", "probably", "suspected", "suspect", "perhaps",
    "maybe",
    "could", "seems", "seem", "appears to", "appear to", "potentially", "presumably", "unclear", "uncertain",
    "unconfirmed", "not sure", "tentatively", "hypothesis",
)
"""English hedges, whole words. `could not` / `couldn't` (a fact: could not connect) and
`not possible` (a negation) are not hedges; `unlikely` is."""

STRONG_NEGATIONS: tuple[str, ...] = (
    "绝对不可能", "根本不可能", "完全不可能", "绝不可能", "决不可能", "不可能", "毫无可能", "绝无可能", "没有可能",
    "不会",
)
"""Strong negations: certainty, not doubt. jieba cuts 不可能 into 不 / 可能, so these are taken out
before hedges are looked for, and their 可能 is never a hedge."""

_DOUBLE_NEGATIONS = ("不无可能", "不是不可能", "并非不可能", "未必不可能")
_STRONG = re.compile(alternation(STRONG_NEGATIONS))
_HEDGE_CJK = re.compile(alternation(HEDGES_CJK))
_HEDGE_ASCII = re.compile(rf"(?<![a-z])(?:{alternation(HEDGES_ASCII)})(?![a-z])")
_NOT_POSSIBLE = re.compile(r"(?<![a-z])not\s+$")
_COULD_NOT = re.compile(r"\s*(?:not(?![a-z])|n't)")  # could not connect: a fact, not a hedge


def _on_word_boundaries(text: str, start: int, end: int) -> bool:
    """`text[start:end]` starts and ends where jieba words of its CJK run start or end."""
    for run in CJK_RUN.finditer(text):
        if run.start() <= start and end <= run.end():
            bounds = {0}
            for word, _, offset in segment(run.group(0)):
                bounds.add(offset + len(word))
            return start - run.start() in bounds and end - run.start() in bounds
    return False


def find_hedges(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(hedge, span) for each hedge in the text, in order."""
    return list(_find_hedges(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_hedges(text: str) -> tuple[tuple[str, tuple[int, int]], ...]:
    normal = normalise(text)
    found: list[tuple[str, tuple[int, int]]] = []
    work = normal
    for m in re.finditer(alternation(_DOUBLE_NEGATIONS), work):
        found.append((m.group(0), m.span()))
        work = work[: m.start()] + " " * len(m.group(0)) + work[m.end():]
    for m in _STRONG.finditer(work):
        work = work[: m.start()] + " " * len(m.group(0)) + work[m.end():]
    for m in _HEDGE_CJK.finditer(work):
        if _on_word_boundaries(normal, m.start(), m.end()):
            found.append((m.group(0), m.span()))
    for m in _HEDGE_ASCII.finditer(work):
        if m.group(0) in ("possible", "possibly") and _NOT_POSSIBLE.search(work[: m.start()]):
            continue  # not possible: a negation
        if m.group(0) == "could" and _COULD_NOT.match(work, m.end()):
            continue
        found.append((m.group(0), m.span()))
    return tuple(sorted(found, key=lambda item: item[1]))


def is_hedged(text: str) -> bool:
    """The text presents what it says as possible, not established (可能, 疑似, 不排除, may …)."""
    return bool(_find_hedges(text))


# --- negations: absence and health -----------------------------------------------------------------

@dataclass(frozen=True)
class Negation:
    cue: str  # the words stating absence or health (没有, 未发现, 0, 均正常, no …)
    kind: str  # "absence" | "health"
    object: str  # what is absent, or what is healthy ("error 日志"); "" when the text does not say
    span: tuple[int, int]  # cue and object


_ABSENCE_PREFIXES = ("没有", "没", "未", "并未", "从未", "均未", "都未", "尚未", "也未", "并没有", "均没有", "都没有",
                     "也没有", "完全没有", "一直没有", "始终没有", "始终未", "一直未")
_ABSENCE_VERBS = ("发现", "出现", "观察到", "检测到", "查询到", "查到", "找到", "看到", "见到", "产生", "触发", "记录到",
                  "收到", "发生", "报错", "报出", "报", "匹配到", "命中", "见")
ABSENCE_CUES: tuple[str, ...] = tuple(
    [p + v for p in _ABSENCE_PREFIXES for v in _ABSENCE_VERBS]
    + ["没有", "并没有", "均没有", "都没有", "也没有", "完全没有", "无", "并无", "毫无", "均无", "都无", "无任何", "不存在",
       "未见", "不再出现", "未曾出现"]
)
"""A prefix + verb (未发现, 没有出现 …) or one of the bare cues."""
# After a cue, these make a failure state or another word, not an absence: 无法, 无关, 没有响应,
# 无可用连接 (an error observed), 无误 (health).
_NOT_ABSENCE_AFTER = ("可用", "响应", "应答", "回应", "权限", "法", "关", "论", "需", "须", "效", "限", "穷", "数", "非",
                      "意", "损", "故", "序", "线", "人", "从", "力", "奈", "疑", "误", "状态", "关系", "关联", "直接关系")
# The lookahead names the characters a cue starts with: elsewhere the engine need not try the
# lookbehinds and the 380 cues one by one (it changes no match).
_ABSENCE = re.compile(
    rf"(?=[{''.join(re.escape(c) for c in sorted({cue[0] for cue in ABSENCE_CUES}))}])"
    rf"(?<!有)(?<!是否)(?<!不是)(?<!并非)(?:{alternation(ABSENCE_CUES)})(?!{alternation(_NOT_ABSENCE_AFTER)})"
)
_OBJECT_FILLER = re.compile(r"\s*(?:任何的?)?\s*")
_OBJECT_STOP = re.compile(rf"[{_BREAK}（()）：:]|\.(?:\s|$)|但|而|且|并且|以及|同时")
_ZERO_AFTER = re.compile(
    r"(?<![\d.:])(?P<cue>0|零)(?![\d.%])(?!星|散|件|售|点)\s*(?:条|个|次|项|例|笔|台|处)?+\s*"
    rf"(?P<obj>[^\s{_BREAK}（()）：:\d][^{_BREAK}（()）]{{0,29}})"
)
_UNIT = r"(?:ms|s|秒|毫秒|分钟|min|h|小时|mb|gb|kb|tb|b|kib|mib|gib|tib|cores|%|/s|/min|/h|rps|qps|ops|ratio|count)(?![a-z])"
_ZERO_BEFORE = re.compile(rf"(?:为|是|=|:|：)\s*(?P<cue>0|零)(?![\d.%a-z])(?!\s*{_UNIT})")
_UNIT_AFTER_ZERO = re.compile(_UNIT)  # 0 ms, 0%: a value, not an absence
_ENGLISH_ABSENCE = re.compile(
    r"(?<![a-z])(?P<cue>no|zero|without|never|none of|did not (?:see|find|observe|detect|show|record)|"
    r"didn't (?:see|find|observe|detect|show|record))(?![a-z])\s*(?P<obj>[a-z0-9_\- /]{0,40})"
)
_ENGLISH_OBJECT_STOP = re.compile(
    r"\s(?:in|during|between|from|for|at|on|since|within|after|before|over|and|but|was|were|is|are|has|have)(?![a-z])"
)
_ENGLISH_NOT_FOUND = re.compile(r"(?<![a-z])(?P<cue>not (?:found|observed|detected|seen|present))(?![a-z])")

HEALTH_CUES: tuple[str, ...] = ("正常", "健康", "稳定", "平稳", "良好", "无误", "normal", "healthy", "stable", "nominal")
"""Words stating health; the subject is the clause text before them (均/都/运行/恢复 … dropped).
Not health: negated (不正常, 非正常, 不稳定, 是否正常, not healthy), or the start of another word
(稳定性, 健康检查, 正常情况下, 正常值, 稳定在 80%)."""
_HEALTH = re.compile(
    r"(?<!不)(?<!非)(?<!欠)(?<!不太)(?<!不够)(?<!是否)(?<!不再)"
    rf"(?:{alternation(c for c in HEALTH_CUES if not c.isascii())})"
    r"(?!性|化|情况|时|来说|的话|值|检查|探针|检测|度|状态|码|流程|在)"
    rf"|(?<![a-z])(?<!not )(?<!not be )(?:{alternation(c for c in HEALTH_CUES if c.isascii())})(?![a-z])"
)
_HEALTH_SUBJECT_TAIL = re.compile(
    r"(?:均已|都已|全部|一切|全都|均|都|运行|恢复|表现|保持|处于|状态|为|是|已经|已|仍然|仍|依然|基本|整体|总体|也|较为|"
    r"比较|非常|十分|很|相对|一直|始终|持续|is|are|was|were|remained|remains|looks|look|all|\s)+$"
)
_SUBJECT_HEAD = re.compile(r"^(?:且|并且|而且|但是|但|同时|而|and|but|\s)+")


def _bounded_object(text: str, start: int) -> tuple[str, int]:
    """The object phrase starting at `start`: up to a clause break or connective, at most 30 chars."""
    filler = _OBJECT_FILLER.match(text, start)
    start = filler.end() if filler else start
    stop = _OBJECT_STOP.search(text, start)
    end = min(stop.start() if stop else len(text), start + 30)
    phrase = text[start:end].rstrip()
    phrase = re.sub(r"(?:的|了|过)$", "", phrase).rstrip()
    return phrase, start + len(phrase)


def _subject_before(text: str, position: int) -> tuple[str, int]:
    start = max(_clause_start(text, position), position - 30)
    subject = _SUBJECT_HEAD.sub("", _HEALTH_SUBJECT_TAIL.sub("", text[start:position])).strip()
    begin = text.find(subject, start) if subject else position
    return subject, begin


def find_negations(text: str) -> list[Negation]:
    """Statements of absence (没有 ERROR 日志, 未发现告警, 0 条, no errors) and of health (均正常,
    运行稳定, healthy), each with what it is about. Exclusions (与 X 没有关系) are not negations."""
    return list(_find_negations(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_negations(text: str) -> tuple[Negation, ...]:
    normal = normalise(text)
    excluded = [e.span for e in _find_exclusions(normal)]
    found: list[Negation] = []

    def add(negation: Negation) -> None:
        if any(s <= negation.span[0] < e for s, e in excluded):
            return
        if any(n.span[0] <= negation.span[0] < n.span[1] for n in found):
            return  # inside a statement already found (没有错误（0 条）)
        found.append(negation)

    for m in _ABSENCE.finditer(normal):
        obj, end = _bounded_object(normal, m.end())
        add(Negation(m.group(0), "absence", obj, (m.start(), max(end, m.end()))))
    for m in _ZERO_AFTER.finditer(normal):
        if _UNIT_AFTER_ZERO.match(normal, m.start("obj")):
            continue  # 0 ms, 0%: a value
        if normal[max(m.start() - 1, 0): m.start()] in ("（", "("):
            continue  # (0 条), (0 series): a count restating its sentence
        obj, end = _bounded_object(normal, m.start("obj"))
        add(Negation(m.group("cue"), "absence", obj, (m.start(), max(end, m.end("cue")))))
    for m in _ZERO_BEFORE.finditer(normal):
        subject, begin = _subject_before(normal, m.start())
        subject = re.sub(r"(?:数|数量|次数|总数|计数|条数|count|total)$", "", subject).strip() or subject
        add(Negation(m.group("cue"), "absence", subject, (begin, m.end())))
    for m in _ENGLISH_ABSENCE.finditer(normal):
        stop = _ENGLISH_OBJECT_STOP.search(m.group("obj"))
        obj = (m.group("obj")[: stop.start()] if stop else m.group("obj")).strip()
        add(Negation(m.group("cue"), "absence", obj, (m.start(), m.start("obj") + len(obj) if obj else m.end("cue"))))
    for m in _ENGLISH_NOT_FOUND.finditer(normal):
        subject, begin = _subject_before(normal, m.start())
        add(Negation(m.group("cue"), "absence", subject, (begin, m.end())))
    for m in _HEALTH.finditer(normal):
        subject, begin = _subject_before(normal, m.start())
        add(Negation(m.group(0), "health", subject, (min(begin, m.start()), m.end())))
    return tuple(sorted(found, key=lambda n: n.span))


# --- absolutes ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Absolute:
    quantifier: str  # 均, 都, 所有, 始终, 从未, always, all …
    predicate: str  # the bound word (内, 低于, 不超过, within) or the state (正常, 成功, 未见异常)
    bound: str | None  # the bound quantity as written ("3000ms", "三十秒"); None for a state
    span: tuple[int, int]  # quantifier … predicate


ABSOLUTE_QUANTIFIERS: tuple[str, ...] = (
    "均", "都", "全部", "全都", "所有", "始终", "一直", "从未", "从不", "总是", "每次", "每个", "每条", "每台", "每一",
    "每项", "每笔", "一律", "皆", "无一例外", "全程", "持续", "完全",
    "always", "all", "every", "each", "never", "consistently", "constantly", "throughout", "entirely",
)
"""Words that make a statement hold for every member or every moment. 均 is
not the 均 of 平均/均值/均衡; 都 is not the 都 of 首都/成都; 每 only with a classifier (每秒 is a rate)."""
_QUANTIFIER = re.compile(
    r"(?<![平人])均(?![值衡匀方线价])|(?<![首成京大])都(?![市会城])|全部|全都|所有|始终|一直|从未|从不|总是|每次|每个|"
    r"每条|每台|每一|每项|每笔|一律|皆|无一例外|全程|持续|完全"
    r"|(?<![a-z])(?:always|all|every|each|never|consistently|constantly|throughout|entirely)(?![a-z])"
)
_BOUND_BEFORE = re.compile(
    r"(?P<cue>从未超过|没有超过|没超过|未超过|不超过|不高于|不低于|低于|小于|少于|不到|不足|高于|大于|超过|多于|至少|保持在|"
    r"维持在|控制在|稳定在|处于|less than|lower than|at most|more than|greater than|higher than|at least|below|under|"
    r"within|above|over|exceeded|exceeds|exceed|<=|>=|≤|≥|<|>|为|是|达到|等于|在)\s*$"
)
_BOUND_AFTER = re.compile(r"^\s*(?P<cue>以内|之内|以下|以上|内)")
_BOUND_INSIDE = re.compile(r"^(?:不到|不足|低于|小于|少于|至多|最多|不超过|未超过|超过|高于|大于|多于|至少|不少于|不低于)|"
                           r"\s*(?:以内|之内|以下|以上|内)$")
_DIGIT_QUANTITY = re.compile(
    r"(?<![a-z0-9_.])\d+(?:\.\d+)?\s?(?:%|ms|毫秒|秒|s|sec|分钟|min|小时|h|mb|gb|kb|次|条|个)?(?![a-z0-9])"
)
_STATE = re.compile(
    r"(?:未|没有|没|无|不)\s*(?:见|出现|发生)?\s*(?:异常|错误|报错|超时|失败|告警)|不可用|正常|成功|完成|可用|稳定|健康|通过|在线|离线|"
    r"存活|就绪|失败|超时|报错|异常|宕机|中断|为空"
    r"|(?<![a-z])(?:normal|healthy|ok|successful|succeeded|success|available|unavailable|stable|passed|failed|"
    r"failing|timed out|errored|completed|succeed)(?![a-z])"
)
_TIMES_IN_TEXT = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[t ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?"
    r"|(?<![\d:])\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?![\d:])"
)


def find_absolutes(text: str) -> list[Absolute]:
    """Universal statements: a quantifier (均, 都, 所有, 始终, 从未, always, all …) followed in its
    clause by a bound with a quantity (均在 3000ms 内完成, 始终低于 80%, never exceeded 2s) or by
    a state (均正常, 全部成功, 都未见异常)."""
    return list(_find_absolutes(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_absolutes(text: str) -> tuple[Absolute, ...]:
    normal = normalise(text)
    work = _TIMES_IN_TEXT.sub(lambda m: " " * len(m.group(0)), normal)  # 10:35 is no bound
    words = [(q.raw, q.span) for q in find_word_quantities(work)]
    found: list[Absolute] = []
    for m in _QUANTIFIER.finditer(work):
        if found and m.start() < found[-1].span[1]:
            continue
        end = min(_clause_end(work, m.end()), m.end() + 40)
        window = work[m.end():end]
        quantities = [(q.group(0).strip(), (m.end() + q.start(), m.end() + q.end()))
                      for q in _DIGIT_QUANTITY.finditer(window)]
        quantities += [(raw, span) for raw, span in words if m.end() <= span[0] and span[1] <= end]
        absolute = None
        for raw, (q_start, q_end) in sorted(quantities, key=lambda item: item[1]):
            after = _BOUND_AFTER.match(work[q_end:end])
            before = _BOUND_BEFORE.search(work[m.end():q_start])
            inner = _BOUND_INSIDE.search(raw)  # a word quantity carries its own bound: 三十秒以内, 不到三成
            if inner is not None:
                absolute = Absolute(m.group(0), inner.group(0).strip(), raw, (m.start(), q_end))
            elif after is not None:
                absolute = Absolute(m.group(0), after.group("cue"), raw, (m.start(), q_end + after.end()))
            elif before is not None and before.group("cue") != "在":
                absolute = Absolute(m.group(0), before.group("cue"), raw, (m.start(), q_end))
            if absolute is not None:
                break
        if absolute is None:
            state = _STATE.search(window)
            if state is not None:
                absolute = Absolute(m.group(0), state.group(0), None, (m.start(), m.end() + state.end()))
        if absolute is not None:
            found.append(absolute)
    return tuple(found)


# --- exclusions --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Exclusion:
    candidate: str  # the cause said not to be one ("db-01 的连接池", "发布")
    cue: str  # 无关, 不是…导致, 排除, ruled out …
    span: tuple[int, int]
    other: str = ""  # 与-forms: the side before 与 (A 与 B 无关 is symmetric)


_RELATION_NONE = (
    "无关", "没有关系", "没关系", "无关联", "没有关联", "不相关", "无直接关系", "没有直接关系", "并无关系", "并无关联",
    "无因果关系", "没有因果关系", "关系不大", "无直接关联", "没有直接关联",
)
_CAUSE_WORDS = ("导致", "引起", "造成", "所致", "引发", "触发", "致使")
_CAUSE_VERBS = rf"(?:所)?(?:{'|'.join(_CAUSE_WORDS)})"
# The cues of the three forms whose candidate comes first (X 已被排除, X 不是根因, X was ruled out).
_Q6 = "已被排除|已经被排除|已排除|可以排除|可排除|被排除"
_Q7 = r"(?:并?不是|并非)(?:本次|此次|这次)?(?:异常|故障|问题)?的?(?:根因|原因|根本原因|诱因|主因|问题所在)"
_Q9 = r"(?:was|is|has been|were|have been) ruled out|is unrelated|was unrelated|(?:is|was) not the (?:root )?cause"
EXCLUSION_PATTERNS: tuple[str, ...] = (  # documented below
    # 与 X 无关 (X: after the last 与/和/跟/同 of the clause)
    rf"(?:与|和|跟|同)\s*(?P<c1>(?:(?!与|和|跟|同){_C}){{1,30}}?)\s*(?:之间)?\s*(?:并)?(?P<q1>{alternation(_RELATION_NONE)})",
    # 不是 X 导致(的), 并非由 X 引起, 不太可能是 X 造成
    rf"(?P<q2>不是|并非|并不是|不会是|不可能是|不太可能是|绝非|绝不是)\s*(?:由|因为|由于)?\s*(?P<c2>{_C}{{1,30}}?)\s*{_CAUSE_VERBS}",
    # 非 X 所致
    rf"(?<![是并绝])(?P<q3>非)(?!常)\s*(?P<c3>{_C}{{1,30}}?)\s*所致",
    # 不是因为 X
    rf"(?P<q4>不是因为|并非因为|不是由于|并非由于)\s*(?P<c4>{_C}{{1,30}})",
    # 排除 X (not 不排除 / 无法排除: hedges)
    rf"(?<!不)(?<!无法)(?<!未)(?<!不能)(?<!难以)(?<!无从)(?<!尚未)"
    rf"(?P<q5>排除)(?:了)?(?:是)?\s*(?P<c5>{_C}{{1,30}}?)\s*(?:的可能性?|导致|引起|这一?因素|因素|原因)?(?=[{_BREAK}]|\.(?:\s|$)|$)",
    # X 已被排除, X 可以排除
    rf"(?P<c6>{_C}{{1,30}}?)\s*(?<!不)(?P<q6>{_Q6})",
    # X 不是(本次)根因
    rf"(?P<c7>{_C}{{1,30}}?)\s*(?P<q7>{_Q7})",
    # English
    r"(?P<q8>not related to|unrelated to|no relation to|no relation with|not caused by|not due to|not the result of|"
    rf"ruled out)\s+(?P<c8>{_C}{{1,40}})",
    rf"(?P<c9>{_C}{{1,40}}?)\s+(?P<q9>{_Q9})",
)
"""The forms of an excluded cause, one pattern each, with the candidate in group c<n> and the cue in
q<n>. The candidate is bounded to its clause and to 30 characters (40 in English). 不排除 / 无法排除
/ 不能排除 are hedges and never match; 排除故障 (troubleshoot) is no exclusion."""
_EXCLUSION = re.compile("|".join(f"(?:{p})" for p in EXCLUSION_PATTERNS))
# The combined pattern tries the three candidate-first forms (c6, c7, c9) at every position, each up
# to 40 candidate lengths: most of its cost. `_exclusion_matches` tries the whole pattern only where
# one of them can start (at most `_REACH` characters and a run of spaces before one of their cues)
# and finds every other match with the other forms alone; and it leaves out every form whose words
# are not in the text (`_FORM_NEEDS`).
_CANDIDATE_FIRST = (5, 6, 8)  # c6, c7, c9
_CANDIDATE_FIRST_CUE = re.compile(f"(?=(?:{_Q6})|(?:{_Q7})|(?:{_Q9}))")  # every position, overlaps included
_REACH = 40  # the longest candidate of c6, c7, c9
_SPACE = re.compile(r"\s")
# For each form, groups of words: a match holds a word of every group (c1: a 与-word and a relation).
_FORM_NEEDS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("与", "和", "跟", "同"), _RELATION_NONE),
    (("不是", "并非", "不会是", "不可能是", "不太可能是", "绝非"), _CAUSE_WORDS),
    (("非",), ("所致",)),
    (("不是因为", "并非因为", "不是由于", "并非由于"),),
    (("排除",),),
    (("排除",),),
    (("不是", "并非"), ("根因", "原因", "诱因", "主因", "问题所在")),
    (("not related to", "unrelated to", "no relation to", "no relation with", "not caused by", "not due to",
      "not the result of", "ruled out"),),
    (("ruled out", "is unrelated", "was unrelated", "not the"),),
)


@cache  # at most 2^9 variants
def _exclusion_forms(present: tuple[bool, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(combined, cue-first) patterns with the forms not `present` replaced by one that never matches
    and has the same groups, so that a match reads the same."""
    forms = [p if here else f"(?!)(?P<c{i + 1}>)(?P<q{i + 1}>)"
             for i, (p, here) in enumerate(zip(EXCLUSION_PATTERNS, present))]
    combined = re.compile("|".join(f"(?:{p})" for p in forms))
    cue_first = re.compile("|".join(f"(?:{p})" for i, p in enumerate(forms) if i not in _CANDIDATE_FIRST))
    return combined, cue_first
# Every exclusion pattern contains one of these words.
_EXCLUSION_HINT = re.compile(
    rf"{alternation(_RELATION_NONE)}|导致|引起|造成|所致|引发|触发|致使|因为|由于|排除|根因|原因|诱因|主因|问题所在|"
    r"related|relation|caused|due to|result of|ruled out|the cause|root cause"
)
_CANDIDATE_TRIM = re.compile(r"^(?:\s|的|了|是|由|为|本次|此次|这次)+|(?:\s|的|了|是|由|为)+$")
_NOT_CANDIDATES = ("故障", "问题", "干扰")  # 排除故障 = troubleshoot (fix the fault), not an exclusion


def _candidate_first_starts(text: str) -> list[int]:
    """Every position where c6, c7 or c9 could start a match: before a cue of theirs, by at most a
    candidate (`_REACH`) and the spaces before the cue (their `\\s*` / `\\s+`)."""
    starts: set[int] = set()
    for cue in _CANDIDATE_FIRST_CUE.finditer(text):
        end = cue.start()
        spaces = end
        while spaces > 0 and _SPACE.match(text, spaces - 1):
            spaces -= 1
        starts.update(range(max(spaces - _REACH, 0), end))
    return sorted(starts)


def _exclusion_matches(text: str) -> list[re.Match[str]]:
    """`list(_EXCLUSION.finditer(text))`, cheaper. A form whose words are not all in the text
    matches nowhere in it, and leaving it out of the alternation changes no match. A match of the
    combined pattern starts at the first position where any of its forms matches; where c6, c7 and
    c9 cannot start, that is where the cue-first forms match. The match itself is always the
    combined pattern's at that position, so the form that wins and every group are the same. No
    form matches the empty string."""
    present = tuple(all(any(word in text for word in group) for group in needs) for needs in _FORM_NEEDS)
    if not any(present):
        return []
    combined, cue_first_forms = _exclusion_forms(present)
    starts = _candidate_first_starts(text) if any(present[i] for i in _CANDIDATE_FIRST) else []
    found: list[re.Match[str]] = []
    position = 0
    while True:
        cue_first = cue_first_forms.search(text, position)
        limit = cue_first.start() if cue_first is not None else len(text) + 1
        match = None
        index = bisect_left(starts, position)
        while match is None and index < len(starts) and starts[index] < limit:
            match = combined.match(text, starts[index])
            index += 1
        if match is None and cue_first is not None:
            match = combined.match(text, cue_first.start())
        if match is None:
            return found
        found.append(match)
        position = match.end()


def find_exclusions(text: str) -> list[Exclusion]:
    """Candidate causes the text excludes: 与 X 无关, 和 X 没有关系, 不是 X 导致的, 并非 X 引起,
    非 X 所致, 排除 X, X 不是原因, not related to X, ruled out X, X was ruled out …"""
    return list(_find_exclusions(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_exclusions(text: str) -> tuple[Exclusion, ...]:
    normal = normalise(text)
    if not _EXCLUSION_HINT.search(normal):
        return ()  # most sentences exclude nothing: skip the costly patterns
    return _exclusions_of(normal, _exclusion_matches(normal))


def _exclusions_of(normal: str, matches: Iterable[re.Match[str]]) -> tuple[Exclusion, ...]:
    """The exclusions the matches of the combined pattern in `normal` state."""
    found: list[Exclusion] = []
    for m in matches:
        index = next(i for i in range(1, 10) if m.group(f"q{i}") is not None)
        candidate = _CANDIDATE_TRIM.sub("", m.group(f"c{index}") or "").strip()
        if not candidate or (index == 5 and candidate.startswith(_NOT_CANDIDATES)):
            continue
        other = ""
        start = m.start()
        if index == 1:
            begin = max(_clause_start(normal, m.start()), m.start() - 30)
            other = _CANDIDATE_TRIM.sub("", normal[begin:m.start()]).strip()
        elif index in (6, 7, 9):
            begin = max(_clause_start(normal, m.start(f"c{index}")), m.start(f"c{index}"))
            start = begin
        found.append(Exclusion(candidate, m.group(f"q{index}"), (start, m.end()), other))
    return tuple(found)


# --- causal assertions -------------------------------------------------------------------------------

CAUSAL_CUES: tuple[str, ...] = (
    "因为", "导致", "由于", "根因", "根本原因", "引起", "造成", "所致", "引发", "致使", "归因", "原因是", "原因在于", "原因为",
    "是…的原因", "caused by", "due to", "because", "root cause", "led to", "leads to", "lead to", "resulted in",
    "results in", "triggered by", "as a result of", "attributed to",
)
"""Words asserting a cause. 是…的原因 is `是 X 的(根本|直接|主要)?原因` within a clause; 引起注意 /
引起重视 are not causes. A causal word inside an exclusion (不是 X 导致的) asserts nothing.
因此 / 所以 are left out: they join reasoning steps as often as causes."""
_CAUSAL = re.compile(
    rf"是{_C}{{1,30}}?的(?:根本|直接|主要)?原因"
    rf"|引起(?!注意|重视|关注)|{alternation(c for c in CAUSAL_CUES if not c.isascii() and c not in ('是…的原因', '引起'))}"
    rf"|(?<![a-z])(?:{alternation(c for c in CAUSAL_CUES if c.isascii())})(?![a-z])"
)


def find_causal(text: str) -> list[tuple[int, int]]:
    """Spans of causal assertions (导致, 由于, 根因, 是 X 的原因, caused by …); the causal words of
    an exclusion (不是 X 导致的) are not assertions and are left out."""
    return list(_find_causal(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_causal(text: str) -> tuple[tuple[int, int], ...]:
    normal = normalise(text)
    excluded = [e.span for e in _find_exclusions(normal)]
    return tuple(
        m.span() for m in _CAUSAL.finditer(normal)
        if not any(s <= m.start() < e for s, e in excluded)
    )
