"""What a sentence asserts, in comparable pieces: quantities, entities, error codes, metric
families, direction (up/down), state (normal/abnormal) and causation.

Used by the embedded verifier to compare a claim with the matched text of its verified evidence,
and by the grounding checks (`statement_check.py`), which bind each quantity to its clause by span.
Text is compared after NFKC and case folding. Extraction order matters: codes, timestamps and
names are taken out first, so the digits inside `HTTP 503`, `ORA-00600`, `payment-service-2` or
`10:35` are never read as quantities.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from shared.text_scan import Scan, per_text_cache

_A = r"a-z0-9_"  # ASCII identifier characters (CJK characters are \w, so \b cannot be used)


@dataclass(frozen=True)
class Quantity:
    value: float  # in the unit class's base unit (ms, MB, %, per second, count)
    unit_class: str  # percent | time | size | rate | count | bare
    unit: str  # the unit as written, normalised
    decimals: int  # digits after the decimal point as written
    raw: str
    # Where it stands in the normalised text (`normalise`); not part of equality.
    span: tuple[int, int] = field(default=(0, 0), compare=False)

    def matches(self, other: Quantity) -> bool:
        """`other` (from evidence) shows this quantity, at this quantity's written precision."""
        if self.unit_class == "bare" or other.unit_class == "bare":
            if self.unit_class not in ("bare", "count") or other.unit_class not in ("bare", "count"):
                return False
        elif self.unit_class != other.unit_class:
            return False
        factor = _UNIT_FACTOR.get(self.unit, 1.0)
        in_my_unit = other.value / factor
        # Within half a unit of the last written digit, so that 0.2095 s written as 0.209 or
        # 0.210 (a renderer's rounding either way) matches, and 0.2095 never reads as 0.208.
        half_step: float = 0.5 / 10**self.decimals  # (int ** int is Any to mypy: the exponent may be negative)
        return abs(in_my_unit - self.value / factor) <= half_step * (1 + 1e-9)


@dataclass(frozen=True)
class Code:
    family: str  # http | http_class | vendor | exception | k8s
    value: str


@dataclass
class Features:
    text: str  # the normalised text, for presence checks
    quantities: list[Quantity] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    codes: list[Code] = field(default_factory=list)
    families: set[str] = field(default_factory=set)
    trend: set[str] = field(default_factory=set)  # up / down
    state: set[str] = field(default_factory=set)  # normal / abnormal
    causal: bool = False

    @property
    def concrete(self) -> bool:
        return bool(self.quantities or self.entities or self.codes or self.families or self.trend or self.state)


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", text).strip()


# --- codes ---------------------------------------------------------------------------------------
_HTTP_CODE = Scan(re.compile(
    rf"(?<![{_A}])(?:http|status|status_code|状态码|错误码|返回码|code)\s*(?:status\s*)?[:= ]?\s*([1-5]\d\d)(?!\d)"
), ("http", "status", "code", "状态码", "错误码", "返回码"))
_HTTP_CLASS = Scan(re.compile(rf"(?<![{_A}])([1-5])xx(?![{_A}])"), ("xx",))
_VENDOR_CODE = Scan(re.compile(rf"(?<![{_A}-])(ora|err|tns|pls|sqlstate|errno)-?(\d{{3,6}})(?![{_A}])"),
                     ("ora", "err", "tns", "pls", "sqlstate"))
_EXCEPTION = Scan(re.compile(rf"(?<![{_A}])(?:[a-z][a-z0-9]*\.)*([a-z][a-z0-9]*(?:exception|error))(?![{_A}])"),
                   ("exception", "error"))
_K8S_REASONS = ("oomkilled", "crashloopbackoff", "imagepullbackoff", "errimagepull", "evicted", "deadlineexceeded")
_K8S_REASON = Scan(re.compile(rf"(?<![{_A}])({'|'.join(_K8S_REASONS)})(?![{_A}])"), _K8S_REASONS)
# --- times and names -----------------------------------------------------------------------------
_DATETIME = Scan(re.compile(
    r"(\d{4}-\d{2}-\d{2})(?:[t ](\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?"
), ("-",))
_CLOCK = Scan(re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::\d{2})?(?![\d:])"), (":",))
_IPV4 = Scan(re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])"), (".",))
_DOTTED_HOST = Scan(re.compile(rf"(?<![{_A}.-])[a-z][a-z0-9-]*(?:\.[a-z0-9-]+){{2,}}(?![{_A}.-])"), (".",))
_HYPHENATED = Scan(re.compile(rf"(?<![{_A}-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![{_A}])"), ("-",))
_UNDERSCORED = Scan(re.compile(rf"(?<![{_A}])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![{_A}])"), ("_",))
# --- quantities ----------------------------------------------------------------------------------
_UNITS: dict[str, tuple[str, str]] = {}
for _unit_class, _names in {
    # `ratio`: the tools' unit for a fraction (0.3 ratio = 30%), as evidence_facts reads it.
    "percent": ["%", "percent", "百分比", "ratio"],
    "time": ["ms", "毫秒", "milliseconds", "millisecond", "msec", "s", "sec", "secs", "second", "seconds", "秒",
             "min", "mins", "minute", "minutes", "分钟", "h", "hr", "hrs", "hour", "hours", "小时"],
    "size": ["kb", "kib", "ki", "mb", "mib", "mi", "gb", "gib", "gi", "tb", "tib", "ti"],
    "rate": ["qps", "rps", "tps", "req/s", "/s", "次/秒", "次每秒"],
    "count": ["次", "个", "条", "台", "次数", "times", "errors", "error", "requests", "request", "pods", "pod",
              "instances", "instance", "restarts", "restart", "hits", "lines", "connections", "threads"],
}.items():
    for _name in _names:
        _UNITS[_name] = (_unit_class, _name)
_UNIT_FACTOR: dict[str, float] = {
    "ms": 1, "毫秒": 1, "milliseconds": 1, "millisecond": 1, "msec": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000, "秒": 1000,
    "min": 60000, "mins": 60000, "minute": 60000, "minutes": 60000, "分钟": 60000,
    "h": 3600000, "hr": 3600000, "hrs": 3600000, "hour": 3600000, "hours": 3600000, "小时": 3600000,
    "ratio": 100,
    "kb": 1 / 1024, "kib": 1 / 1024, "ki": 1 / 1024, "mb": 1, "mib": 1, "mi": 1,
    "gb": 1024, "gib": 1024, "gi": 1024, "tb": 1024 * 1024, "tib": 1024 * 1024, "ti": 1024 * 1024,
}
_UNIT_ALTERNATION = "|".join(re.escape(name) for name in sorted(_UNITS, key=len, reverse=True))
_QUANTITY = re.compile(
    rf"(?<![{_A}.])(\d{{1,3}}(?:,\d{{3}})+|\d+(?:\.\d+)?)(?:\s?({_UNIT_ALTERNATION}))?(?![a-z0-9])"
)
# --- families, polarity, causation ---------------------------------------------------------------
_FAMILIES: dict[str, list[str]] = {
    "cpu": ["cpu", "处理器"],
    "memory": ["memory", "mem", "内存", "heap", "堆内存", "rss", "oom", "oomkilled"],
    "latency": ["latency", "延迟", "时延", "耗时", "响应时间", "慢", "slow", "p99", "p95", "p999", "p50", "duration"],
    "error": ["error", "errors", "错误", "报错", "5xx", "4xx", "失败", "fail", "failed", "failure", "exception"],
    "disk": ["disk", "磁盘", "inode", "iops"],
    "connection": ["connection", "connections", "连接", "连接池", "pool"],
    "gc": ["gc", "垃圾回收", "full gc"],
    "traffic": ["qps", "rps", "tps", "请求量", "throughput", "吞吐", "流量", "traffic"],
    "restart": ["restart", "restarts", "重启", "crashloopbackoff"],
    "timeout": ["timeout", "timeouts", "timed out", "超时"],
}
_UP = ["升高", "增加", "上涨", "上升", "飙升", "增长", "激增", "突增", "暴涨", "攀升", "变高",
       "increase", "increased", "increasing", "rise", "rising", "rose", "spike", "spiked", "spiking",
       "surge", "surged", "grew", "growing", "jump", "jumped"]
_DOWN = ["下降", "减少", "降低", "回落", "下跌", "骤降", "暴跌", "变低",
         "decrease", "decreased", "decreasing", "drop", "dropped", "decline", "declined", "fell", "falling",
         "reduced"]
_ABNORMAL = ["异常", "错误", "报错", "失败", "超时", "告警", "故障", "宕机", "崩溃", "不可用", "oom",
             "error", "errors", "exception", "exceptions", "failed", "failure", "failures", "fail", "timeout",
             "timeouts", "timed out", "unavailable", "crash", "crashed", "abnormal", "unhealthy", "critical"]
_NORMAL = ["正常", "健康", "稳定", "normal", "healthy", "stable"]
_NEGATED_ABNORMAL = re.compile(
    r"(?:无|未|没有|不存在|未发现|未见|未出现|未观察到|未检测到|未产生)[^,.;，。；]{0,8}?"
    r"(?:异常|错误|报错|失败|超时|告警|故障|error|exception|fail|timeout|oom)"
    rf"|(?<![{_A}])(?:no|not|without|zero|never)(?![{_A}])[^,.;]{{0,24}}?"
    rf"(?:error|exception|fail|timeout|alert|anomal|oom)[a-z]*"
)
_EMPTY_RESULT = re.compile(
    rf"(?<![{_A}])(?:no (?:log lines|lines|hits|results|matches|matching|records|data|rows|documents|changes)"
    r"|0 (?:matching )?(?:hits|results|matches|rows|records|lines|条)"
    r"|(?:hits|results|rows|matches|count|total)\s*[:=]\s*0(?![\d.])"
    r"|empty result)"
    r"|未查询到|无结果|没有匹配|无匹配|未匹配|查询结果为空|0 ?条"
)
_CAUSAL_CJK = ("因为", "导致", "由于", "根因", "根本原因", "引起", "造成", "所致", "引发", "致使", "归因")
_CAUSAL = Scan(re.compile(
    "|".join(_CAUSAL_CJK)
    + rf"|(?<![{_A}])(?:caused by|due to|because|root cause|result(?:s|ed)? in|led to|leads? to|triggered by)(?![{_A}])"
), (*_CAUSAL_CJK, "caused by", "due to", "because", "root cause", "result", "led to", "lead", "triggered by"))


def _words(words: list[str]) -> Scan:
    ascii_words = [w for w in words if w.isascii()]
    other = [w for w in words if not w.isascii()]
    parts = []
    if ascii_words:
        parts.append(rf"(?<![a-z])(?:{'|'.join(map(re.escape, sorted(ascii_words, key=len, reverse=True)))})(?![a-z])")
    if other:
        parts.append("|".join(map(re.escape, sorted(other, key=len, reverse=True))))
    return Scan(re.compile("|".join(parts)), tuple(words))


_FAMILY_PATTERNS = {name: _words(words) for name, words in _FAMILIES.items()}
_UP_PATTERN, _DOWN_PATTERN = _words(_UP), _words(_DOWN)
_ABNORMAL_PATTERN, _NORMAL_PATTERN = _words(_ABNORMAL), _words(_NORMAL)


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with every span (in order, not overlapping: finditer's) replaced by spaces."""
    pieces, done = [], 0
    for start, end in spans:
        pieces += [text[done:start], " " * (end - start)]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _take(pattern: re.Pattern[str] | Scan, text: str) -> tuple[list[re.Match[str]], str]:
    found = list(pattern.finditer(text))
    return found, _blank(text, [m.span() for m in found]) if found else text


def _clock(hour: str, minute: str) -> str:
    return f"{int(hour):02d}:{minute}"


# Extraction is a pure function of the text, asked again for the same texts (a cited ref's text for
# every statement that cites it, the cited evidence joined; each claim is grounded twice): the
# features are kept per text (`per_text_cache`: the last 1024 texts of at most 10,000 characters), and
# every caller gets its own copy.
_CACHED_TEXTS = 1024
_MAX_CACHED_CHARS = 10_000


def extract(text: str) -> Features:
    kept = _extract(text)
    return Features(kept.text, list(kept.quantities), list(kept.entities), list(kept.codes), set(kept.families),
                    set(kept.trend), set(kept.state), kept.causal)


@per_text_cache(_CACHED_TEXTS, _MAX_CACHED_CHARS)
def _extract(text: str) -> Features:
    """The features of `text`; kept in the cache, never handed out (see `extract`)."""
    normal = normalise(text)
    features = Features(text=normal)
    work = normal

    found, work = _take(_HTTP_CODE, work)
    features.codes += [Code("http", m.group(1)) for m in found]
    found, work = _take(_HTTP_CLASS, work)
    features.codes += [Code("http_class", f"{m.group(1)}xx") for m in found]
    found, work = _take(_VENDOR_CODE, work)
    features.codes += [Code("vendor", f"{m.group(1)}-{m.group(2)}") for m in found]
    found, work = _take(_K8S_REASON, work)
    features.codes += [Code("k8s", m.group(1)) for m in found]
    found, work = _take(_EXCEPTION, work)
    features.codes += [Code("exception", m.group(1)) for m in found]

    found, work = _take(_DATETIME, work)
    for m in found:
        features.entities.append(m.group(1))
        if m.group(2):
            features.entities.append(_clock(m.group(2), m.group(3)))
    found, work = _take(_CLOCK, work)
    features.entities += [_clock(m.group(1), m.group(2)) for m in found if int(m.group(1)) < 24]
    for pattern in (_IPV4, _DOTTED_HOST, _HYPHENATED, _UNDERSCORED):
        found, work = _take(pattern, work)
        features.entities += [m.group(0) for m in found]

    for m in _QUANTITY.finditer(work):
        number = m.group(1).replace(",", "")
        unit = m.group(2) or ""
        unit_class = _UNITS[unit][0] if unit else "bare"
        decimals = len(number.split(".")[1]) if "." in number else 0
        value = float(number) * _UNIT_FACTOR.get(unit, 1.0) if unit_class in ("time", "size", "percent") else float(number)
        features.quantities.append(Quantity(value, unit_class, unit, decimals, m.group(0), m.span()))

    for name, pattern in _FAMILY_PATTERNS.items():
        if pattern.search(normal):
            features.families.add(name)
    if any(code.family in ("http", "http_class") and code.value.startswith("5") for code in features.codes):
        features.families.add("error")

    negated, rest = _take(_NEGATED_ABNORMAL, normal)
    empty, rest = _take(_EMPTY_RESULT, rest)
    if negated or empty or _NORMAL_PATTERN.search(rest):
        features.state.add("normal")
    if _ABNORMAL_PATTERN.search(rest) or any(c.family in ("exception", "k8s", "vendor") for c in features.codes):
        features.state.add("abnormal")
    if _UP_PATTERN.search(normal):
        features.trend.add("up")
    if _DOWN_PATTERN.search(normal):
        features.trend.add("down")
    features.causal = bool(_CAUSAL.search(normal))
    return features


def entity_present(entity: str, evidence_text: str) -> bool:
    """The entity occurs in the evidence as a whole name (a pod suffix such as `-7f9c` allowed)."""
    if entity not in evidence_text:  # the pattern matches the entity literally
        return False
    pattern = rf"(?<![{_A}-]){re.escape(entity)}(?![{_A}])"
    return re.search(pattern, evidence_text) is not None


def overlap(claim_text: str, evidence_text: str) -> float:
    """Share of the claim's CJK bigrams and ASCII words that occur in the evidence text."""
    claim = normalise(claim_text)
    evidence = normalise(evidence_text)
    tokens = re.findall(r"[a-z0-9_]{2,}", claim)
    cjk = "".join(re.findall(r"[\u4e00-\u9fff]", claim))
    tokens += [cjk[i : i + 2] for i in range(len(cjk) - 1)]
    if not tokens:
        return 0.0
    return sum(1 for token in tokens if token in evidence) / len(tokens)
