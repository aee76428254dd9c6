"""Property: ranking evidence refs with each text's score and template read once gives
the ranking of the code it replaced, fresh and from the caches. The replaced implementation is kept
below as the oracle (copied): the points' deviations from their series' median and the
round-robin order across series; the score and the ref template are the oracles of the earlier
speed change (test_evidence_text_speed_equivalence). Inputs mix metric points (with their
stored values, -0.0 and equal values included), series summaries, log lines and boilerplate, with
texts that could trip a cache: non-ASCII digits and whitespace, Chinese text, long lines."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.executor import evidence_salience as salience
from services.executor.evidence_salience import rank_refs, ref_template
from services.executor.log_clusters import message_template
from shared.core.contracts import EvidenceRef
from shared.log_templates import mask
from tests.unit.test_evidence_text_speed_equivalence import oracle_ref_template, oracle_score

_template = mask.__wrapped__  # the mask computed, never served from the cache

# --- oracle: the replaced code ---------------------------------------------------------------------

_SERIES_PATH = re.compile(r"^(?P<series>series\[\d+\])\.points\[\d+\]$")


def oracle_point_deviations(refs: list[EvidenceRef], values: Mapping[str, float]) -> dict[int, float]:
    by_series: dict[str, list[tuple[int, float]]] = {}
    for index, ref in enumerate(refs):
        path = _SERIES_PATH.match(ref.raw_path)
        value = values.get(ref.raw_path) if path else None
        if path and value is not None:
            by_series.setdefault(path.group("series"), []).append((index, value))
    deviations: dict[int, float] = {}
    for points in by_series.values():
        numbers = [v for _, v in points]
        median = statistics.median(numbers)
        spread = statistics.median(abs(v - median) for v in numbers)
        floor = max(abs(median) * 0.02, 1e-9)
        for index, value in points:
            deviations[index] = abs(value - median) / max(spread, floor)
    return deviations


Ranked = tuple[int, EvidenceRef, float, bool, str]  # index, ref, score, boilerplate, template


def oracle_rank_refs(refs: list[EvidenceRef], values: Mapping[str, float]) -> list[Ranked]:
    deviations = oracle_point_deviations(refs, values)
    ranked: list[Ranked] = [(index, ref, oracle_score(index, ref, deviations), ref.raw_path in salience.BOILERPLATE_PATHS,
               oracle_ref_template(ref.text)) for index, ref in enumerate(refs)]
    depth: dict[int, int] = {}
    by_series: dict[str, list[Ranked]] = {}
    for item in ranked:
        if (path := _SERIES_PATH.match(item[1].raw_path)) is not None:
            by_series.setdefault(path.group("series"), []).append(item)
    for points in by_series.values():
        for rank, item in enumerate(sorted(points, key=lambda p: (-p[2], p[0]))):
            depth[item[0]] = rank
    ranked.sort(key=lambda item: (item[3], depth.get(item[0], 0), -item[2], item[0]))
    return ranked


# --- inputs --------------------------------------------------------------------------------------

LOG = "2026-11-29T10:27:53Z ERROR payment-service host=pay-7f9c-2 c.a.PayController - 支付请求处理超时 orderId=P815160395"
PIECES = st.sampled_from([
    LOG, "WARN", "INFO", "error", "status=503", "HTTP 500", "code: 502", "timeout", "Connection refused", "失败", "超时",
    "traceId=521e351e11073b9d37d6cbf128f7d0eb", "0b3c1d2e-4f5a-4b6c-8d7e-9f0a1b2c3d4e", "P815160395", "3000ms",
    "2026-11-29T10:00:00Z ", "2026-11-29T10:00:00.5Z\t", " ", "\u3000", "\x1c", "\u0663", "\uff13", "ſtatus=503", "x" * 450,
    "statuſ 5\u0660\u0660", "HTTP:::500", "cOdE=599", "status= 5", "code 50", "http\u3000503", "Status:", "5\uff10\uff10",
])
TEXTS = st.one_of(st.lists(PIECES | st.text(max_size=6), max_size=12).map("".join), st.text(max_size=30))


@st.composite
def ref_lists(draw: st.DrawFn) -> tuple[list[EvidenceRef], dict[str, float]]:
    refs, values = [], {}
    for series in range(draw(st.integers(0, 3))):
        numbers = draw(st.lists(st.floats(-1e4, 1e4, allow_nan=False) | st.sampled_from([0.0, -0.0, 50.0]), max_size=12))
        for point, value in enumerate(numbers):
            path = f"series[{series}].points[{point}]"
            if draw(st.booleans()) or point == 0:
                values[path] = value  # a point without a stored value ranks as a plain ref
            refs.append(EvidenceRef(raw_path=path, text=f"pay-svc cpu_usage={value:.2f}% at 2026-11-29T10:{point:02d}:00Z"))
        refs.append(EvidenceRef(raw_path=f"series[{series}].summary", text=draw(TEXTS)))
    paths = st.sampled_from(["summary", "hits[0]", "hits[1]", "changes[0]", "series[0].points[0]", "series[9].summary", ""])
    for _ in range(draw(st.integers(0, 8))):
        refs.append(EvidenceRef(raw_path=draw(paths), text=draw(TEXTS)))
    return draw(st.permutations(refs)), values


def _fields(refs: list[EvidenceRef], values: Mapping[str, float]) -> list[Ranked]:
    return [(item.position, item.ref, item.score, item.boilerplate, item.template) for item in rank_refs(refs, values)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ref_lists())
def test_the_ranking_is_the_replaced_codes_fresh_and_cached(refs_and_values: tuple[list[EvidenceRef], dict[str, float]]) -> None:
    refs, values = refs_and_values
    expected = oracle_rank_refs(refs, values)
    assert _fields(refs, values) == expected
    assert _fields(refs, values) == expected  # again, from the caches
    assert salience._point_deviations(refs, values) == oracle_point_deviations(refs, values)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_a_cached_template_is_the_computed_one(text: str) -> None:
    for _ in range(2):
        assert message_template(text) == _template(text)
        assert ref_template(text) == oracle_ref_template(text)
    long = text + " x1" * 1000  # past the cached length: computed every time
    assert message_template(long) == _template(long)
