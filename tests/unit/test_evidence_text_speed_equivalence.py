"""Property: the faster evidence-text code gives byte-identical results to the code it replaced.

The replaced implementations are kept below as oracles (copied; ranks and clusters returned as
plain tuples): message templates, the ref templates and log clusters built on them (which now
only merge the oracle's: shared/log_templates.py clusters a set's masks), the ranking of
evidence refs, and metric value spelling. Inputs mix what real ref texts hold (timestamps, hex and
mixed ids, UUIDs, numbers, hyphens, underscores) with what could trip a shortcut: non-ASCII digits
and whitespace, Chinese text, lone surrogates, and floats from -0.0 to nan.
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, datetime

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.executor import evidence_salience
from services.executor.evidence_salience import rank_refs, ref_template
from services.executor.log_clusters import LEVEL_WEIGHT, cluster_hits, message_template, template_key
from shared.core.contracts import EvidenceRef
from shared.core.tool_results import LogHit
from shared.core.value_format import _number, format_value

# --- oracles: the replaced code --------------------------------------------------------------

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{6,}\b")
_MIXED_ID = re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{4,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACES = re.compile(r"\s+")


def oracle_message_template(message: str) -> str:
    text = _UUID.sub("<UUID>", message)
    text = _HEX.sub("<HEX>", text)
    text = _MIXED_ID.sub("<ID>", text)
    text = _NUMBER.sub("<N>", text)
    return _SPACES.sub(" ", text).strip()


_TIMESTAMP_PREFIX = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\s+")


def oracle_ref_template(text: str) -> str:
    return oracle_message_template(_TIMESTAMP_PREFIX.sub("", text[:1000]))[:240]


def oracle_score(index: int, ref: EvidenceRef, deviations: dict[int, float]) -> float:
    s = evidence_salience
    if ref.raw_path in s.BOILERPLATE_PATHS:
        return 0.0
    if s._SERIES_SUMMARY_PATH.match(ref.raw_path):
        return 3.5
    if index in deviations:
        deviation = deviations[index]
        return 2.0 + min(deviation / 10.0, 1.5) if deviation >= s.ANOMALY_SPREADS else 0.5
    level = s._LEVEL.search(ref.text[:s.LEVEL_PREFIX_CHARS])
    score = s._LEVEL_SCORE.get(level.group("level").upper(), 1.0) if level else 1.0
    head = ref.text[:s.FAILURE_SCAN_CHARS]
    lowered = head.lower()
    if any(word in lowered for word in s._FAILURE_WORDS) or s._SERVER_ERROR_STATUS.search(head):
        score += 0.5
    return score


def oracle_rank_refs(refs: list[EvidenceRef], values: dict[str, float]) -> list[tuple]:
    deviations = evidence_salience._point_deviations(refs, values)  # unchanged
    ranked = [
        (index, ref, oracle_score(index, ref, deviations), ref.raw_path in evidence_salience.BOILERPLATE_PATHS,
         oracle_ref_template(ref.text))
        for index, ref in enumerate(refs)
    ]
    # Points taken in turns across series (each series' best first), as rank_refs does since the
    # round-robin change; plainly: a point's depth is how many of its series' points outrank it.
    def depth(item: tuple) -> int:
        match = re.match(r"^(series\[\d+\])\.points\[\d+\]$", item[1].raw_path)
        if match is None:
            return 0
        return sum(1 for other in ranked if other is not item
                   and re.match(rf"^{re.escape(match.group(1))}\.points\[\d+\]$", other[1].raw_path)
                   and (-other[2], other[0]) < (-item[2], item[0]))
    depths = {item[0]: depth(item) for item in ranked}
    ranked.sort(key=lambda item: (item[3], depths[item[0]], -item[2], item[0]))
    return ranked


def oracle_cluster_hits(hits: list[dict]) -> list[tuple]:
    clusters: dict[tuple[str, str], list[int]] = {}
    for index, hit in enumerate(hits):
        level = str(hit.get("level", "")).upper()
        if level not in LEVEL_WEIGHT:
            continue
        clusters.setdefault((level, oracle_message_template(str(hit.get("message", "")))), []).append(index)

    def heaviest_first(item: tuple[tuple[str, str], list[int]]) -> tuple[float, int]:
        (level, _), indexes = item
        return -LEVEL_WEIGHT.get(level, 0.0) * math.log2(1 + len(indexes)), indexes[0]

    return [(level, template, indexes) for (level, template), indexes in sorted(clusters.items(), key=heaviest_first)]


def oracle_number(value: float, max_decimals: int, min_decimals: int = 0) -> str:
    text = f"{value:.{max_decimals}f}"
    if max_decimals > min_decimals and "." in text:
        whole, frac = text.split(".")
        frac = frac.rstrip("0")
        frac = frac + "0" * (min_decimals - len(frac)) if len(frac) < min_decimals else frac
        text = f"{whole}.{frac}" if frac else whole
    return "0" if text in ("-0", "-0.0") else text


# --- generated inputs -----------------------------------------------------------------------

SEPARATORS = st.sampled_from([
    " ", "  ", "-", "_", ".", "=", ":", "/", "<", ">", "%", ",", "\t", "\n", "\r\n", "\x0b", "\x1c",
    "\u00a0", "\u2028", "\u3000", "\u200b",  # \u200b is no whitespace
])
ODD = st.sampled_from([
    "é", "ß", "支付", "超时", "调用失败", "错误",
    "\u0663", "\uff13", "\u00b2", "\u2167", "\ud800", "\udfff",  # Arabic and wide 3, ², Ⅷ, surrogates
    "T", "Z", "e", "E", "x", "ERROR", "WARN", "INFO", "status=503", "timeout", "HTTP 500",
])


def _timestamp_tail(moment: datetime) -> str:
    """Fractional seconds and the Z are optional in a timestamp prefix, and so is the kind of space."""
    fraction = f".{moment.microsecond // 1000:03d}" if moment.microsecond % 3 == 0 else ""
    return fraction + ("Z" if moment.microsecond % 2 == 0 else "") + (" " if moment.second % 2 == 0 else "\t")


TIMESTAMPS = st.datetimes(
    min_value=datetime(1999, 1, 1), max_value=datetime(2099, 12, 31), timezones=st.just(UTC),
).map(lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S") + _timestamp_tail(moment))
TOKENS = st.one_of(
    SEPARATORS,
    ODD,
    TIMESTAMPS,
    st.from_regex(r"[0-9a-fA-F]{1,14}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9]{1,9}", fullmatch=True),
    st.from_regex(r"-?[0-9]{1,7}(\.[0-9]{0,4})?", fullmatch=True),
    st.from_regex(r"[a-z]{2,8}(-[a-z0-9]{1,6}){0,2}", fullmatch=True),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: u.hex),
    st.text(max_size=6),
)
TEXTS = st.one_of(st.lists(TOKENS, max_size=24).map("".join), st.text(max_size=40))


DIGIT_SWAP = st.lists(st.sampled_from("0123456789"), min_size=10, max_size=10).map(
    lambda digits: str.maketrans("0123456789", "".join(digits))
)

LOG_EXAMPLE = "2026-11-29T21:13:45Z ERROR payment-service worker-3 upstream timeout calling ledger order=ab12cd34ef"
METRIC_EXAMPLE = "payment-service cpu_usage=93.25% at 2026-11-29T21:13:45Z"
PROPERTY = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Lists of generated texts: fewer examples, each of them holds many texts.
LISTS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(TEXTS)
@example(LOG_EXAMPLE)
@example(METRIC_EXAMPLE)
@example(f"req {uuid.UUID(int=0xABCDEF0123456789)} at 1.5abcd and 12.0x9f3e2a_77 \u0663\u0664 1\u0663.5")
@example("a-b-c-d-e 0af3c9 123456 abcdef ab12 1.2a3b4 _9a9a9a \u3000 \u2028x\x1c ")
def test_message_template_matches_the_original(text):
    assert message_template(text) == oracle_message_template(text)
    assert ref_template(text) == oracle_ref_template(text)


@PROPERTY
@given(TEXTS, DIGIT_SWAP)
@example(LOG_EXAMPLE, str.maketrans("0123456789", "9876543210"))
def test_texts_that_differ_only_in_ascii_digits_share_a_key_and_a_template(text, swap):
    """What rank_refs and cluster_hits rely on when they compute one template per key."""
    other = text.translate(swap)
    assert template_key(other) == template_key(text)
    assert oracle_message_template(other) == oracle_message_template(text)
    assert oracle_ref_template(other) == oracle_ref_template(text)


@LISTS
@given(TEXTS.filter(bool), st.data())
def test_texts_that_differ_in_anything_but_ascii_digits_have_different_keys(text, data):
    at = data.draw(st.integers(0, len(text) - 1))
    replacement = data.draw(TOKENS.filter(bool))
    other = text[:at] + replacement + text[at + 1:]
    zero = str.maketrans("123456789", "0" * 9)
    assert (template_key(other) == template_key(text)) == (other.translate(zero) == text.translate(zero))


def _fields(ranked) -> list[tuple]:
    return [(item.position, item.ref, item.score, item.boilerplate, item.template) for item in ranked]


def _metric_ref(service: str, metric: str, value: float, unit: str, minute: int) -> str:
    return f"{service} {metric}={format_value(value, unit)} at 2026-11-29T21:{minute % 60:02d}:00Z"


@st.composite
def ref_lists(draw):
    """(refs, the point values of the stored result they came from)."""
    refs, point_values = [], {}
    for series in range(draw(st.integers(0, 3))):
        unit = draw(st.sampled_from(["percent", "ms", "bytes", "count", "rps"]))
        value = st.floats(-1e4, 1e4, allow_nan=False) | st.sampled_from([0.0, -0.0, 50.0])
        values = draw(st.lists(value, max_size=12))
        for point, value in enumerate(values):
            point_values[f"series[{series}].points[{point}]"] = value
            refs.append(EvidenceRef(raw_path=f"series[{series}].points[{point}]",
                                    text=_metric_ref("pay-svc", "cpu_usage", value, unit, point)))
        refs.append(EvidenceRef(raw_path=f"series[{series}].summary", text=draw(TEXTS)))
    paths = st.sampled_from(["summary", "hits[0]", "hits[1]", "changes[0]", "series[0].points[0]", "series[9].summary"])
    log_lines = TIMESTAMPS.map(lambda stamp: stamp + LOG_EXAMPLE[21:])
    for _ in range(draw(st.integers(0, 8))):
        refs.append(EvidenceRef(raw_path=draw(paths | st.just("")), text=draw(TEXTS | log_lines)))
    return draw(st.permutations(refs)), point_values


@LISTS
@given(ref_lists())
def test_rank_refs_matches_the_original(refs_and_values):
    refs, values = refs_and_values
    assert _fields(rank_refs(refs, values)) == oracle_rank_refs(refs, values)


@LISTS
@given(st.lists(st.fixed_dictionaries({
    "level": st.sampled_from(["ERROR", "warn", "FATAL", "INFO", "", 3]),
    "message": TEXTS | st.sampled_from([LOG_EXAMPLE, LOG_EXAMPLE.replace("3", "7"), LOG_EXAMPLE.replace("ab", "x")]),
}), max_size=20))
def test_cluster_hits_merges_the_original_clusters(hits):
    """Since templates are a set's (Drain over the masks), clusters only merge the replaced code's:
    every line of one original cluster is in one cluster of its level, heaviest first."""
    typed = [LogHit(ts="", level=str(hit["level"]), message=hit["message"]) for hit in hits]
    clusters = cluster_hits(typed)
    where = {index: (c.level, c.template) for c in clusters for index in c.hit_indexes}
    original = oracle_cluster_hits(hits)
    assert sorted(where) == sorted(index for _, _, indexes in original for index in indexes)
    for level, _, indexes in original:
        assert len({where[index] for index in indexes}) == 1 and where[indexes[0]][0] == level
    order = [(-c.weight, c.hit_indexes[0]) for c in clusters]
    assert order == sorted(order)


VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e3, 1e3),
    st.floats(-1e-2, 1e-2),
    st.integers(-10**20, 10**20),
    st.sampled_from([0.0, -0.0, 0.05, -0.05, 0.005, -0.004, 0.0049, 99.995, 1024.0, 1024**4 * 3.2, 1e16, 1e300]),
    st.decimals(places=6, allow_nan=False, allow_infinity=False, min_value=-10**6, max_value=10**6),
)


# format_value itself is unchanged: it spells every value through _number, tested below over
# every decimals pair it uses (and more).
@settings(max_examples=3000, deadline=None)
@given(VALUES, st.integers(0, 7), st.integers(-2, 8))
@example(-0.0, 2, 1)
@example(-0.0, 0, 0)
@example(-0.04, 1, 0)
@example(10.0, 2, 0)
@example(100.0, 3, 2)
def test_number_matches_the_original(value, max_decimals, min_decimals):
    assert _number(value, max_decimals, min_decimals) == oracle_number(value, max_decimals, min_decimals)


def test_a_metric_series_ranks_as_before():
    """Hundreds of points of one series: the case the per-key template memo is for."""
    values = [60.0 + (k * 7919 % 1000) / 100 + (35.0 if k > 180 else 0.0) for k in range(214)]
    refs = [
        EvidenceRef(raw_path=f"series[0].points[{k}]", text=_metric_ref("pay-svc", "cpu_usage", v, "percent", k))
        for k, v in enumerate(values)
    ]
    refs.append(EvidenceRef(raw_path="series[0].summary", text="payment-service cpu_usage: min=60.0%, max=104.99%"))
    refs.append(EvidenceRef(raw_path="summary", text="query_metrics service=payment-service: 1 series, 214 points"))
    point_values = {f"series[0].points[{k}]": v for k, v in enumerate(values)}
    ranked = rank_refs(refs, point_values)
    assert _fields(ranked) == oracle_rank_refs(refs, point_values)
    point_templates = {item.template for item in ranked if item.position < 214}
    assert point_templates == {"pay-svc cpu_usage=<N>% at <N>-<N>-<ID>:<N>:<N>Z"}
