"""A series' segmentation is kept once computed: the metrics tool's onset ref and the
agent's anomaly assessment segment the same series. Whatever was asked before, every onset is the
one a fresh computation gives, and `segment_boundaries` still returns a new list each time."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core import change_point
from shared.core.change_point import find_onset, segment_boundaries

LEVELS = st.sampled_from([0.0, -0.0, 1.0, 4.0, 5.0, 35.0, 95.0, 1e-9, 1e6])
SERIES = st.lists(st.tuples(LEVELS, st.integers(1, 25), st.floats(0, 3)), min_size=1, max_size=5).map(
    lambda blocks: [level + (k * 7919 % 11) * noise / 10 for level, length, noise in blocks for k in range(length)]
) | st.lists(st.floats(-1e6, 1e6, allow_nan=False) | st.integers(0, 9).map(float), max_size=40)
ASKS = st.lists(st.fixed_dictionaries({"direction": st.sampled_from([None, "up", "down"]),
                                       "min_relative": st.sampled_from([0.0, 0.1])}), min_size=1, max_size=4)


def _fresh(values: list[float], ask: dict[str, Any]) -> change_point.ChangePoint | None:
    change_point._float_series_boundaries.cache_clear()
    return find_onset(values, **ask)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SERIES, ASKS)
def test_an_onset_asked_again_is_the_fresh_one(values: list[float], asks: list[dict[str, Any]]) -> None:
    expected = [_fresh(values, ask) for ask in asks]
    change_point._float_series_boundaries.cache_clear()
    for _ in range(2):
        assert [find_onset(values, **ask) for ask in asks] == expected
        assert [find_onset(tuple(values), **ask) for ask in asks] == expected  # any sequence, one key


def test_segment_boundaries_gives_each_caller_its_own_list() -> None:
    values = [1.0] * 10 + [9.0] * 10
    first = segment_boundaries(values)
    first.append(99)
    assert segment_boundaries(values) == [10]
