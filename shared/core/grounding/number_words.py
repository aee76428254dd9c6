"""Quantities stated in words, vague quantifiers, and quantity-like words that state nothing checkable.

Digits with a unit (`93.5%`, `3000ms`, `12 条`) are read by the digit extractor
(`claim_features.py`); this module reads what it cannot: Chinese number words
(三成, 一半, 过半, 翻倍, 百分之三十, 三分之一), Chinese numerals with a unit (三十秒, 两次), ratios
written with 倍 (even `2倍`, whose digit alone reads as a bare number), and a few English words
(doubled, half, twice). Every word is in a closed list below; a word outside the lists that reads as
a quantity (十几次, 上千条, 数倍) is reported by `find_unaccepted_quantities`, never guessed at.

All text is compared in one normal form, `normalise()` (NFKC, then case folding); every span
indexes the normalised text. Nothing here knows any estate data: only language.

Decisions:
- Exact Chinese numerals with a unit are quantities like digits: 三十秒 = 30 000 ms, 两次 = 2.
- 一 with a count classifier (一次, 一个, 一条) is the indefinite article as often as a count, so it
  is a quantity only after an explicit count word (仅一次, 共一条, 只有一个); 二次 is an ordinal
  (二次重试), 第三次 is an ordinal.
- Approximate numerals (十几, 几十, 上百, 数千, 成百上千, 好几倍, 三十多次, 十余条) are not accepted:
  they name an order of magnitude no evidence can confirm. Plurality words with 次/个/条 (几次,
  好几次, 数次, 若干) only say "more than one" and are the vague quantifier "repeated".
- Two adjacent digits (两三次, 三四成, 七八成) state a closed range and are accepted as an
  approximate interval (2..3, 30..40).
- 约/大约/近/左右 … widen the stated value to an interval: ±5 percentage points for 成 and 半
  (half a 成), ±10 % of the value otherwise. 近/最近/过去/前 before a time (近一小时) name a window,
  so the time stays exact.
- Bounds: 超过/逾/高于 (open) and 至少/不少于/以上 (closed) give a lower bound; 不到/不足/低于
  (open) and 至多/不超过/以下/以内/内 (closed) give an upper bound. Percentages are capped at 100.
- 增加/增长/提高 … N 倍 is ambiguous in Chinese (strictly ×(N+1), commonly ×N): the interval is N..N+1;
  增加一倍 is ×2 exactly.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from shared.text_scan import Scan, alternation, per_text_cache

# Statements and their clauses: short texts, about fifty distinct ones a request; the last 2048 of at
# most 2,000 characters are kept (a few megabytes at most).
_CACHED_TEXTS = 2048
_MAX_CACHED_CHARS = 2000


def normalise(text: str) -> str:
    """The one form every grounding lexicon compares in: NFKC, case folding, NFKC again (folding
    can leave a non-NFKC sequence). Whitespace is kept, so spans stay close to the written text."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


@dataclass(frozen=True)
class WordQuantity:
    raw: str  # the matched text (normalised), modifiers included
    kind: str  # "percent" | "ratio" | "time" | "count" | "size"
    value: float  # the number as written, in the kind's base unit (%, ×, ms, 1, MB)
    low: float  # the interval the words assert …
    high: float  # … (math.inf when unbounded above; percent capped at 100)
    approx: bool  # widened by 约/近/左右 … or a range (两三次)
    span: tuple[int, int]  # in normalise(text)
    low_open: bool = False  # 过半, 超过三成: the low end itself is excluded
    high_open: bool = False  # 不到一半: the high end itself is excluded

    def admits(self, observed: float) -> bool:
        """`observed` (in the same base unit) lies in the asserted interval."""
        if observed < self.low or (self.low_open and observed == self.low):
            return False
        return observed <= self.high and not (self.high_open and observed == self.high)


# --- Chinese numerals ----------------------------------------------------------------------------

_CJK_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CJK_SMALL_UNITS = {"十": 10, "百": 100, "千": 1000}
_CJK_BIG_UNITS = {"万": 10_000, "亿": 100_000_000}
_NUM_CJK = r"[零〇一二两三四五六七八九十百千万亿]+(?:点[零〇一二三四五六七八九]+)?"
_NUM_DIGIT = r"\d+(?:\.\d+)?"
# A numeral never starts inside an ordinal or a word such as 统一, 唯一, 单一, 万一.
_CJK_BEFORE = r"(?<![第统唯单同某万千百十零〇一二两三四五六七八九\d.])"
_DIGIT_BEFORE = r"(?<![\d.a-z_])"


def cjk_number(text: str) -> float | None:
    """The value of an exact Chinese numeral (三十, 一百零五, 两千, 三点五, 二〇二四); None if it is
    not one."""
    if not text:
        return None
    whole, _, fraction = text.partition("点")
    if fraction and not all(ch in _CJK_DIGITS for ch in fraction):
        return None
    if whole and all(ch in _CJK_DIGITS for ch in whole):
        if len(whole) == 1:
            value = float(_CJK_DIGITS[whole])
        elif "〇" in whole or "零" in whole or len(whole) >= 3:
            value = float("".join(str(_CJK_DIGITS[ch]) for ch in whole))  # positional: 二〇二四
        else:
            return None  # 两三: a range, not a numeral
    else:
        total, section, number = 0, 0, 0
        for ch in whole:
            if ch in _CJK_DIGITS:
                number = _CJK_DIGITS[ch]
            elif ch in _CJK_SMALL_UNITS:
                section += (number or 1) * _CJK_SMALL_UNITS[ch]
                number = 0
            elif ch in _CJK_BIG_UNITS:
                total = (total + section + number) * _CJK_BIG_UNITS[ch]
                section, number = 0, 0
            else:
                return None
        value = float(total + section + number)
    if fraction:
        value += float("0." + "".join(str(_CJK_DIGITS[ch]) for ch in fraction))
    return value


def _number(text: str) -> float | None:
    text = text.strip()
    if re.fullmatch(_NUM_DIGIT, text):
        return float(text)
    return cjk_number(text)


# --- the closed list ------------------------------------------------------------------------------

# Units after a Chinese numeral: (kind, factor to the kind's base unit). Time in ms, size in MB.
_TIME_UNITS = {
    "毫秒": 1, "秒钟": 1000, "秒": 1000, "分钟": 60_000, "个小时": 3_600_000, "小时": 3_600_000,
    "个钟头": 3_600_000, "钟头": 3_600_000, "天": 86_400_000, "个星期": 604_800_000, "星期": 604_800_000,
    "周": 604_800_000,
}
_SIZE_UNITS = {"字节": 1 / 1048576, "kb": 1 / 1024, "kib": 1 / 1024, "mb": 1, "mib": 1, "gb": 1024, "gib": 1024,
               "tb": 1048576, "tib": 1048576}
# Count classifiers; each with the characters that, following it, make a different word (个月, 起来).
_COUNT_UNITS = {
    "次": "数", "个": "月人", "条": "件", "台": "阶", "例": "如子", "项": "目", "笔": "记", "行": "为业动情驶",
    "起": "来点始", "名": "称字", "位": "置于", "处": "理于", "遍": "历布", "轮": "询换", "批": "准评",
    "篇": "", "份": "额", "张": "", "套": "餐", "组": "件织成合",
}
_EXPLICIT_COUNT = ("仅有", "只有", "仅", "只", "共计", "总共", "一共", "累计", "合计", "共")
_APPROX_BEFORE = ("大约", "大概", "约莫", "差不多", "将近", "接近", "几乎", "约", "近")
_APPROX_AFTER = ("左右", "上下")
_ABOVE_OPEN = ("超过了", "超过", "超出", "逾", "高于", "大于", "多于")
_ABOVE_CLOSED = ("至少", "不少于", "不低于")
_BELOW_OPEN = ("不到", "不足", "少于", "低于", "小于")
_BELOW_CLOSED = ("至多", "最多", "不超过", "未超过")
_WINDOW_BEFORE = ("最近", "过去", "前")  # 最近三十分钟: a window, not an estimate
_PREFIXES = (_APPROX_BEFORE + _ABOVE_OPEN + _ABOVE_CLOSED + _BELOW_OPEN + _BELOW_CLOSED + _WINDOW_BEFORE
             + _EXPLICIT_COUNT)
_SUFFIXES = _APPROX_AFTER + ("以上", "以下", "以内", "之内", "出头", "内")


# A modifier may be followed by a copula or a verb of amount: 约为三成, 约占一半, 超过了三成.
_PRE = rf"(?:(?P<pre>{alternation(_PREFIXES)})\s*(?:为|占|有|达到|达|是)?\s*)?"
_POST = rf"(?:\s*(?P<post>{alternation(_SUFFIXES)}))?"

NUMBER_WORDS: dict[str, tuple[str, float, float, float, bool, bool]] = {
    # half and proportions of a whole (percent of the population the sentence is about)
    "一半": ("percent", 50, 50, 50, False, False),
    "半数": ("percent", 50, 50, 50, False, False),
    "过半数": ("percent", 50, 50, 100, True, False),
    "过半": ("percent", 50, 50, 100, True, False),
    "大半": ("percent", 50, 50, 100, True, False),
    "多半": ("percent", 50, 50, 100, True, False),  # only when not the hedge 多半是 (= probably)
    "大多数": ("percent", 50, 50, 100, True, False),
    "大部分": ("percent", 50, 50, 100, True, False),
    "多数": ("percent", 50, 50, 100, True, False),
    "绝大多数": ("percent", 90, 90, 100, False, False),  # the strong reading: at least nine in ten
    "绝大部分": ("percent", 90, 90, 100, False, False),
    "少数": ("percent", 50, 0, 50, False, True),
    "小部分": ("percent", 50, 0, 50, False, True),
    "少部分": ("percent", 50, 0, 50, False, True),
    "极少数": ("percent", 10, 0, 10, False, False),
    "极少部分": ("percent", 10, 0, 10, False, False),
    # ratios (new / old)
    "翻倍": ("ratio", 2, 2, 2, False, False),
    "翻了一倍": ("ratio", 2, 2, 2, False, False),
    "翻一倍": ("ratio", 2, 2, 2, False, False),
    "翻一番": ("ratio", 2, 2, 2, False, False),
    "翻了一番": ("ratio", 2, 2, 2, False, False),
    "翻两番": ("ratio", 4, 4, 4, False, False),
    "翻了两番": ("ratio", 4, 4, 4, False, False),
    "减半": ("ratio", 0.5, 0.5, 0.5, False, False),
    "减少一半": ("ratio", 0.5, 0.5, 0.5, False, False),
    "下降一半": ("ratio", 0.5, 0.5, 0.5, False, False),
    "降低一半": ("ratio", 0.5, 0.5, 0.5, False, False),
    # half units of time
    "半小时": ("time", 1_800_000, 1_800_000, 1_800_000, False, False),
    "半个小时": ("time", 1_800_000, 1_800_000, 1_800_000, False, False),
    "半个钟头": ("time", 1_800_000, 1_800_000, 1_800_000, False, False),
    "半分钟": ("time", 30_000, 30_000, 30_000, False, False),
    "一刻钟": ("time", 900_000, 900_000, 900_000, False, False),
    # English
    "more than half": ("percent", 50, 50, 100, True, False),
    "less than half": ("percent", 50, 0, 50, False, True),
    "majority of": ("percent", 50, 50, 100, True, False),
    "most of": ("percent", 50, 50, 100, True, False),
    "half of": ("percent", 50, 50, 50, False, False),
    "a third of": ("percent", 100 / 3, 33.3, 33.4, False, False),
    "a quarter of": ("percent", 25, 25, 25, False, False),
    "two thirds of": ("percent", 200 / 3, 66.6, 66.7, False, False),
    "doubled": ("ratio", 2, 2, 2, False, False),
    "tripled": ("ratio", 3, 3, 3, False, False),
    "quadrupled": ("ratio", 4, 4, 4, False, False),
    "halved": ("ratio", 0.5, 0.5, 0.5, False, False),
    "twice as": ("ratio", 2, 2, 2, False, False),
    "twice": ("count", 2, 2, 2, False, False),
}
"""Every word (or word pattern) that states a quantity, with what it asserts. Entries
whose value is fixed are listed as (kind, value, low, high, low_open, high_open); the patterned
ones (N成, N倍, 百分之N, X分之Y, N个百分点, numeral + unit) are described by their readers below.
Proportions (一半, 过半, 大多数 …) are percentages of whatever population the sentence is about;
ratios are new / old."""

_HEDGE_AFTER_DUOBAN = "是因为由于会与和可能也就"  # 多半是配置问题 = probably; not a proportion
_FIXED_CJK = [w for w in NUMBER_WORDS if not w.isascii()]
_FIXED_ASCII = [w for w in NUMBER_WORDS if w.isascii()]
_FIXED = Scan(re.compile(
    rf"{_PRE}(?P<core>{alternation(_FIXED_CJK)}){_POST}"
    rf"|(?<![a-z])(?P<ascii>{alternation(_FIXED_ASCII)})(?![a-z])"
), tuple(NUMBER_WORDS))
# X 分之 Y: 百分之三十 (percent 30), 千分之五 (0.5), 三分之二 (66.7); digits allowed (百分之30).
_FRACTION = Scan(re.compile(
    rf"{_PRE}(?P<den>[二两三四五六七八九十百千万]+|\d+)分之(?P<num>{_NUM_DIGIT}|{_NUM_CJK}){_POST}"
), ("分之",))
# N 成 (tenths): 三成 = 30 %, 三成半 = 35 %. 一成不变 is an idiom; 成员, 成功 … are other words.
_TENTHS = Scan(re.compile(
    rf"{_PRE}{_CJK_BEFORE}(?P<n>[一二两三四五六七八九]|十)成(?P<half>半)?(?!不变|员|本|功|为|熟|果|都|立|型|品|交|长|绩|就|效|形|千|百|批|片|套|因){_POST}"
), ("成",))
# N 个百分点: a difference of N percentage points.
_POINTS = Scan(re.compile(rf"{_PRE}(?P<n>{_NUM_DIGIT}|{_NUM_CJK})\s*个?\s*百分点"), ("百分点",))
_INCREASE = ("增加", "增长", "提高", "提升", "上涨", "上升", "升高", "多出", "高出", "翻")
# N 倍: a ratio. After an increase verb, ×N..×(N+1) (增加一倍 = ×2).
_TIMES = Scan(re.compile(
    rf"(?:(?P<verb>{alternation(_INCREASE)})了?\s*)?{_PRE}"
    rf"(?:{_DIGIT_BEFORE}(?P<d>{_NUM_DIGIT})|{_CJK_BEFORE}(?P<c>{_NUM_CJK}))\s*倍(?!数){_POST}"
    rf"|{_DIGIT_BEFORE}(?P<x>{_NUM_DIGIT})\s?x(?![a-z0-9])"
), ("倍", "x"))
_ENGLISH_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_ENGLISH_TIMES = Scan(re.compile(
    rf"(?<![a-z])(?P<n>{'|'.join(_ENGLISH_NUMBERS)}) times(?P<ratio> (?:as|more|higher|larger|greater|the))?(?![a-z])"
), ("times",))
_RANGE_UNITS = ["成", "倍", *_TIME_UNITS, *_COUNT_UNITS]
# 两三次, 三四成: two adjacent digits, a closed range.
_RANGE = Scan(re.compile(
    rf"{_CJK_BEFORE}(?P<a>[一二两三四五六七八九])(?P<b>[二两三四五六七八九])\s*(?P<unit>{alternation(_RANGE_UNITS)})"
), tuple("二两三四五六七八九"))
_HALF_HOURS = Scan(re.compile(rf"{_PRE}{_CJK_BEFORE}(?P<n>{_NUM_CJK})个半(?:小时|钟头)"), ("个半",))
_UNIT_WORDS = {**{u: ("time", f) for u, f in _TIME_UNITS.items()}, **{u: ("size", f) for u, f in _SIZE_UNITS.items()},
               **{u: ("count", 1.0) for u in _COUNT_UNITS}}
_WITH_UNIT = Scan(re.compile(
    rf"{_PRE}{_CJK_BEFORE}(?P<n>{_NUM_CJK})\s*(?P<unit>{alternation(_UNIT_WORDS)})(?![a-z]){_POST}"
), tuple("零〇一二两三四五六七八九十百千万亿"))

# --- not accepted: quantity-like words that state no checkable number ----------------------------

_ANY_UNIT = alternation([*_UNIT_WORDS, "成", "倍"])
# 数 as "several" only after a function word or a non-CJK character: 参数十, 次数十 are other words.
_SHU = r"(?:(?<=[有了达约近共至到过现出生的为是和或及在报\s])|(?<![\u4e00-\u9fff]))数"
# 上 as "up to" not inside 以上, 线上, 之上 …
_SHANG = r"(?<![以线之加向往马早晚网身面路台桌楼场手世会])上"
UNACCEPTED_PATTERNS: tuple[str, ...] = (  # documented below
    r"成百上千|成千上万|成百|成千|上百上千|数以[百千万亿]计",
    rf"[零〇一二两三四五六七八九十百千万]*[十百千万]几[十百千万]*(?:\s*(?:{_ANY_UNIT}))?",  # 十几次, 二十几个
    rf"好?几[十百千万]+(?:\s*(?:{_ANY_UNIT}))?",  # 几十次, 好几百条
    rf"{_SHU}[十百千万]+(?:\s*(?:{_ANY_UNIT}))?",  # 数千条
    rf"{_SHANG}[百千万亿]+(?:\s*(?:{_ANY_UNIT}))?",  # 上千条
    rf"(?:{_NUM_CJK}|\d+)\s*个?[多余来](?:\s*(?:{_ANY_UNIT}))",  # 三十多次, 10余条, 二十来个, 一个多小时
    rf"(?:好几|几|{_SHU}|若干|多)(?:倍|成)",  # 数倍, 好几倍, 几成, 多倍
    rf"(?:好几|几|{_SHU}|若干)(?:{alternation(_TIME_UNITS)}|{alternation(_SIZE_UNITS)})",  # 几分钟
    r"(?<![a-z])(?:dozens|hundreds|thousands|millions|tens) of(?![a-z])",
    r"(?<![a-z])(?:several|a few) (?:dozen|hundred|thousand|million)(?![a-z])",
)
"""Quantity-like words that are not accepted: approximate numerals (十几, 几十, 数千, 上百, 成百上千,
三十多, 十余, 二十来), approximate ratios and tenths (数倍, 好几倍, 几成, 多倍), approximate durations
(几分钟, 数小时) and English orders of magnitude (hundreds of, a few thousand). Each matched text is
reported by find_unaccepted_quantities and never read as a quantity."""
# Every form above holds one of these (成百, 上千, 数千, 几十, 三十多次, 十余条, 二十来个, 数倍, 若干小时, hundreds of …).
_UNACCEPTED = Scan(re.compile("|".join(f"(?:{p})" for p in UNACCEPTED_PATTERNS)), (
    "成", "上", "数", "几", "多", "余", "来", "倍", "若干", "of", "dozen", "hundred", "thousand", "million"))


def find_unaccepted_quantities(text: str) -> list[str]:
    """Words that read as a quantity but are neither digits nor in the closed lists (几十次, 上千条,
    数倍, 好几倍, 十几分钟, 三十多次, hundreds of): the matched texts, normalised, in order."""
    return list(_find_unaccepted_quantities(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_unaccepted_quantities(text: str) -> tuple[str, ...]:
    return tuple(m.group(0).strip() for m in _UNACCEPTED.finditer(normalise(text)) if m.group(0).strip())


# --- reading ---------------------------------------------------------------------------------------


def _interval(
    value: float, kind: str, pre: str | None, post: str | None, tolerance: float | None = None,
) -> tuple[float, float, bool, bool, bool]:
    """(low, high, approx, low_open, high_open) for a value and its modifiers."""
    cap = 100.0 if kind == "percent" else math.inf
    tol = tolerance if tolerance is not None else abs(value) * 0.1
    if pre in _WINDOW_BEFORE or (pre == "近" and kind == "time"):
        return value, value, False, False, False
    if pre in _APPROX_BEFORE or post in _APPROX_AFTER:
        return max(value - tol, 0.0), min(value + tol, cap), True, False, False
    if post == "出头":
        return value, min(value + tol, cap), True, False, False
    if pre in _ABOVE_OPEN:
        return value, cap, False, True, False
    if pre in _ABOVE_CLOSED or post == "以上":
        return value, cap, False, False, False
    if pre in _BELOW_OPEN:
        return 0.0, value, False, False, True
    if pre in _BELOW_CLOSED or post in ("以下", "以内", "之内", "内"):
        return 0.0, value, False, False, False
    return value, value, False, False, False


def _quantity(match: re.Match[str], kind: str, value: float, tolerance: float | None = None,
              pre: str | None = None, post: str | None = None) -> WordQuantity:
    groups = match.groupdict()
    pre = pre if pre is not None else groups.get("pre")
    post = post if post is not None else groups.get("post")
    low, high, approx, low_open, high_open = _interval(value, kind, pre, post, tolerance)
    return WordQuantity(match.group(0).strip(), kind, value, low, high, approx, match.span(), low_open, high_open)


def _blank(text: str, span: tuple[int, int]) -> str:
    return text[: span[0]] + " " * (span[1] - span[0]) + text[span[1]:]


def find_word_quantities(text: str) -> list[WordQuantity]:
    """Every quantity stated in words, in text order (spans index `normalise(text)`)."""
    return list(_find_word_quantities(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_word_quantities(text: str) -> tuple[WordQuantity, ...]:
    work = normalise(text)
    found: list[WordQuantity] = []
    for m in _UNACCEPTED.finditer(work):
        work = _blank(work, m.span())  # 几十次 must not read as 十次

    def take(pattern: Scan, read: Callable[[re.Match[str]], WordQuantity | None]) -> None:
        nonlocal work
        for m in list(pattern.finditer(work)):
            quantity = read(m)
            if quantity is not None:
                found.append(quantity)
                work = _blank(work, m.span())

    def fixed(m: re.Match[str]) -> WordQuantity | None:
        word = m.group("core") or m.group("ascii")
        if word == "多半" and m.end() < len(work) and work[m.end()] in _HEDGE_AFTER_DUOBAN:
            return None
        kind, value, low, high, low_open, high_open = NUMBER_WORDS[word]
        if (m.group("pre") or m.group("post")) and low == high:
            return _quantity(m, kind, value, 5.0 if kind == "percent" else None)
        return WordQuantity(m.group(0).strip(), kind, value, low, high, False, m.span(), low_open, high_open)

    def fraction(m: re.Match[str]) -> WordQuantity | None:
        den, num = _number(m.group("den")), _number(m.group("num"))
        if not den or num is None:
            return None
        value = num / den * 100
        quantity = _quantity(m, "percent", value)
        rounded = round(value, 1)
        if abs(rounded - value) > 1e-9 and quantity.low == quantity.high:  # 1/3: 33.3..33.4
            low, high = math.floor(value * 10) / 10, math.ceil(value * 10) / 10
            quantity = WordQuantity(quantity.raw, "percent", value, low, high, False, quantity.span)
        return quantity

    def tenths(m: re.Match[str]) -> WordQuantity:
        value = (_number(m.group("n")) or 0) * 10 + (5 if m.group("half") else 0)
        return _quantity(m, "percent", value, 5.0)

    def points(m: re.Match[str]) -> WordQuantity | None:
        value = _number(m.group("n"))
        return None if value is None else _quantity(m, "percent", value)

    def times(m: re.Match[str]) -> WordQuantity | None:
        if m.group("x"):
            return _quantity(m, "ratio", float(m.group("x")))
        value = _number(m.group("d") or m.group("c"))
        if value is None:
            return None
        if m.group("verb") and not m.group("pre"):
            if value == 1:
                return WordQuantity(m.group(0).strip(), "ratio", 2.0, 2.0, 2.0, False, m.span())
            return WordQuantity(m.group(0).strip(), "ratio", value, value, value + 1, False, m.span())
        return _quantity(m, "ratio", value)

    def english_times(m: re.Match[str]) -> WordQuantity:
        value = float(_ENGLISH_NUMBERS[m.group("n")])
        return WordQuantity(m.group(0), "ratio" if m.group("ratio") else "count", value, value, value, False, m.span())

    def ranged(m: re.Match[str]) -> WordQuantity | None:
        a, b = _CJK_DIGITS[m.group("a")], _CJK_DIGITS[m.group("b")]
        if b != a + 1:
            return None
        unit = m.group("unit")
        if unit == "成":
            kind, factor = "percent", 10.0
        elif unit == "倍":
            kind, factor = "ratio", 1.0
        else:
            kind, factor = _UNIT_WORDS[unit]
        return WordQuantity(m.group(0), kind, a * factor, a * factor, b * factor, True, m.span())

    def half_hours(m: re.Match[str]) -> WordQuantity | None:
        value = _number(m.group("n"))
        return None if value is None else _quantity(m, "time", (value + 0.5) * 3_600_000)

    def with_unit(m: re.Match[str]) -> WordQuantity | None:
        numeral, unit = m.group("n"), m.group("unit")
        value = cjk_number(numeral)
        if value is None:
            return None
        kind, factor = _UNIT_WORDS[unit]
        if kind == "count":
            after = work[m.end("unit"): m.end("unit") + 1]
            if after and after in _COUNT_UNITS[unit]:
                return None  # 三个月, 一起来: another word
            if numeral == "一" and m.group("pre") not in _EXPLICIT_COUNT:
                return None  # 一次, 一个: the article
            if numeral == "二" and unit == "次":
                return None  # 二次重试: an ordinal
        return _quantity(m, kind, value * factor)

    take(_HALF_HOURS, half_hours)  # 一个半小时 before 半小时
    take(_FIXED, fixed)
    take(_FRACTION, fraction)
    take(_POINTS, points)
    take(_TENTHS, tenths)
    take(_TIMES, times)
    take(_ENGLISH_TIMES, english_times)
    take(_RANGE, ranged)
    take(_WITH_UNIT, with_unit)
    return tuple(sorted(found, key=lambda q: q.span))


# --- vague quantifiers -----------------------------------------------------------------------------

VAGUE_QUANTIFIERS: dict[str, str] = {
    **dict.fromkeys(["多次", "频繁", "反复", "屡次", "不断", "一再", "接连", "频频", "屡屡", "再三", "多番", "几次",
                     "好几次", "数次", "几个", "好几个", "几条", "好几条", "若干",
                     "repeatedly", "repeated", "frequently", "frequent", "multiple", "several", "recurring",
                     "again and again", "many times"], "repeated"),
    **dict.fromkeys(["大量", "大批", "海量", "大面积", "成批", "大规模", "批量", "众多", "诸多", "无数", "密集", "不少",
                     "many", "lots of", "a lot of", "numerous", "massive", "a large number of", "large numbers of",
                     "plenty of", "tons of", "widespread", "a flood of"], "many"),
    **dict.fromkeys(["少量", "个别", "偶尔", "零星", "偶发", "极个别", "偶见", "寥寥", "稀少",
                     "a few", "few", "occasional", "occasionally", "sporadic", "sporadically", "isolated", "rarely",
                     "a handful of", "a couple of"], "few"),
    **dict.fromkeys(["明显", "显著", "大幅", "急剧", "剧烈", "大幅度", "骤升", "骤降", "骤增", "骤减", "暴涨", "暴跌",
                     "暴增", "飙升", "激增", "猛增", "猛涨", "陡增", "陡升", "陡降", "剧增", "锐减", "大涨", "大跌",
                     "突增", "突降", "断崖式",
                     "significant", "significantly", "sharp", "sharply", "dramatic", "dramatically", "steep",
                     "steeply", "marked", "markedly", "substantial", "substantially", "drastic", "drastically",
                     "spiked", "surged", "soared", "skyrocketed", "plummeted", "plunged"], "marked_change"),
}
"""Words that claim an amount without a number, each with the rule its evidence
must meet (the rule is applied by the check that uses this list, over the cited refs):
  "repeated"      – at least 2 observations (log lines, points, change records) of the thing;
  "many"          – at least 10;
  "few"           – at most 5;
  "marked_change" – two cited values of one series differing by ≥1.5× or ≤1/1.5×.
Words marked in _NEEDS_CHANGE_WORD (明显, 显著, significant …) only count when a change word
follows (明显升高, 显著下降): 明显的错误 states no amount. A word after a negation in its clause
(未见明显升高, 没有大量报错, no significant increase) asserts nothing and is not reported.
Plurality words (几次, 好几次, 数次, 几个, 若干) only say "more than one": "repeated". 持续/一直/始终
are absolutes (polarity.find_absolutes), not amounts."""
_NEEDS_CHANGE_WORD = frozenset({
    "明显", "显著", "大幅", "急剧", "剧烈", "大幅度", "significant", "significantly", "sharp", "sharply", "dramatic",
    "dramatically", "steep", "steeply", "marked", "markedly", "substantial", "substantially", "drastic", "drastically",
})
_CHANGE_WORD = re.compile(
    r"\s*(?:地|的)?\s*(?:升高|上升|增加|增长|下降|降低|减少|上涨|回落|下跌|变慢|变快|波动|恶化|改善|提升|抖动|高于|低于|"
    r"偏高|偏低|变化|升|降|增|减|涨|跌)"
    r"|\s+(?:increase|increased|increases|rise|rose|risen|rising|jump|jumped|drop|dropped|decline|declined|fall|fell|"
    r"spike|spiked|growth|grew|higher|lower|change|changed|degradation|degraded|slower|faster)(?![a-z])"
)
# Longest first. The Chinese words and the English ones never start at the same character, so each
# kind is its own alternation, and the English words' lookbehind is asked once per position, not
# once per word.
_VAGUE_WORDS = sorted(VAGUE_QUANTIFIERS, key=len, reverse=True)
_VAGUE = Scan(re.compile(
    "|".join(re.escape(w) for w in _VAGUE_WORDS if not w.isascii())
    + "|(?<![a-z])(?:" + "|".join(re.escape(w) for w in _VAGUE_WORDS if w.isascii()) + ")(?![a-z])"
), tuple(_VAGUE_WORDS))
_CLAUSE_BREAK = re.compile(r"[，。；;,!?！？\n]|\.(?=\s|$)")
_NEGATOR = re.compile(r"未|没|(?<!有)无(?!论|法)|不(?!断|少|仅|同|但|久)|非(?!常)|(?<![a-z])(?:no|not|without|never)(?![a-z])|n't")
_NUMERAL_BEFORE = re.compile(r"[\d零〇一二两三四五六七八九十百千万]$")


def find_vague(text: str) -> list[tuple[str, str, tuple[int, int]]]:
    """(word, rule, span) for each vague quantifier the text asserts. The span covers the word and,
    for words that need one, the change word after it (明显升高)."""
    return list(_find_vague(text))


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _find_vague(text: str) -> tuple[tuple[str, str, tuple[int, int]], ...]:
    normal = normalise(text)
    found: list[tuple[str, str, tuple[int, int]]] = []
    unaccepted = [m.span() for m in _UNACCEPTED.finditer(normal)]
    for m in _VAGUE.finditer(normal):
        word, start, end = m.group(0), m.start(), m.end()
        if word in _NEEDS_CHANGE_WORD:
            change = _CHANGE_WORD.match(normal, end)
            if change is None:
                continue
            end = change.end()
        if any(s <= start < e for s, e in unaccepted):
            continue  # part of 几十次, several hundred: find_unaccepted_quantities reports it
        if word in ("多次", "几次", "几个", "几条") and _NUMERAL_BEFORE.search(normal[:start]):
            continue  # 十多次, 二十几个: an approximate numeral (find_unaccepted_quantities)
        breaks = list(_CLAUSE_BREAK.finditer(normal, 0, start))
        clause_start = breaks[-1].end() if breaks else 0
        if _NEGATOR.search(normal[max(clause_start, start - 8): start]):
            continue
        found.append((word, VAGUE_QUANTIFIERS[word], (start, end)))
    return tuple(found)
