"""The change-point detector (shared/core/change_point.py) on synthetic series: the onset is where the
change starts — a step's first point, a ramp's first risen point (not where it crosses a level), a
spike's first point, a sawtooth's first tooth, a fall's first lower point — and noise has none."""

from __future__ import annotations

import random
import warnings

import pytest

from shared.core.change_point import find_end, find_onset, segment_boundaries


def _noise(n: int, level: float, sigma: float, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0, sigma) for _ in range(n)]


def _ramp(n: int, start: int, base: float, target: float, minutes: int, sigma: float, seed: int = 7) -> list[float]:
    values = _noise(n, base, sigma, seed)
    for k in range(start, n):
        values[k] += (target - base) * min(1.0, (k - start + 1) / minutes)
    return values


@pytest.mark.parametrize("seed", range(5))
def test_a_step_gets_its_first_point(seed: int) -> None:
    values = _noise(60, 30.0, 1.5, seed)
    for k in range(38, 60):
        values[k] += 50.0
    onset = find_onset(values)
    assert onset is not None and onset.index == 38 and onset.direction == "up"
    assert 28 < onset.before < 32 and 78 < onset.after < 82


@pytest.mark.parametrize("seed", range(5))
def test_a_ramp_gets_the_point_where_the_rise_starts(seed: int) -> None:
    values = _ramp(60, 38, 30.0, 92.0, 6, 1.8, seed)
    onset = find_onset(values)
    assert onset is not None and onset.direction == "up"
    assert 37 <= onset.index <= 38  # not where it crosses a threshold (85% is reached at 43)


def test_a_slow_noiseless_ramp_starts_at_its_first_lower_point() -> None:
    values = [50e9] * 20 + [50e9 * (1 - k / 27) for k in range(1, 28)] + [0.0] * 13
    onset = find_onset(values)
    assert onset is not None and onset.index == 20 and onset.direction == "down"
    assert onset.before == 50e9 and onset.after < 25e9


@pytest.mark.parametrize("seed", range(3))
def test_a_falling_series_is_a_change_too(seed: int) -> None:
    values = _ramp(60, 30, 800.0, 100.0, 4, 10.0, seed)
    onset = find_onset(values)
    assert onset is not None and onset.direction == "down" and 29 <= onset.index <= 30
    assert find_onset(values, direction="up") is None


def test_a_spike_that_returns_gets_its_first_point() -> None:
    values = _noise(60, 200.0, 5.0)
    for k in range(40, 46):
        values[k] += 600.0
    onset = find_onset(values)
    assert onset is not None and onset.index == 40 and onset.after > 700


def test_a_sawtooth_gets_its_first_tooth() -> None:
    values = _noise(60, 10.0, 0.5)
    for k in range(30, 60):
        values[k] += 8.0 * ((k - 30) % 5 + 1)
    onset = find_onset(values)
    assert onset is not None and onset.index == 30 and onset.direction == "up"


@pytest.mark.parametrize("seed", range(20))
def test_noise_has_no_change_point(seed: int) -> None:
    values = _noise(60, 40.0, 3.0, seed)
    assert segment_boundaries(values) == []
    assert find_onset(values) is None


def test_a_single_outlier_is_no_change() -> None:
    values = _noise(60, 40.0, 1.0)
    values[30] = 400.0
    assert find_onset(values) is None


def test_a_window_that_starts_inside_the_change_has_no_onset() -> None:
    assert find_onset([90.0] * 60) is None
    assert find_onset([50.0 + 10 * k for k in range(6)] + [110.0] * 54) is None
    assert find_onset([1.0, 2.0, 3.0]) is None  # too few points


def test_min_relative_drops_an_immaterial_shift() -> None:
    values = _noise(60, 30.0, 0.2)
    for k in range(30, 60):
        values[k] += 2.0
    assert find_onset(values) is not None
    assert find_onset(values, min_relative=0.1) is None


def test_deterministic() -> None:
    values = _ramp(90, 50, 5.0, 40.0, 10, 0.8)
    assert find_onset(values) == find_onset(list(values))


def test_a_count_wobbling_by_one_is_no_change_until_it_really_rises() -> None:
    wobble = [4, 4, 2, 4, 3, 5, 5, 5, 5, 5, 4, 4, 5, 5, 4, 5, 5, 5, 5, 3, 2, 3, 3, 5, 4, 3, 5]
    assert find_onset(wobble) is None
    onset = find_onset(wobble + [12, 27, 41, 40, 40, 42, 42, 41, 41])
    assert onset is not None and onset.index == len(wobble) and onset.direction == "up"


@pytest.mark.parametrize("width", [10, 20, 30])
def test_a_change_that_came_and_went_mid_window_has_its_onset_and_its_end(width: int) -> None:
    """No single split separates a block in the middle (either part holds both levels): the
    block is found whole, with its start as the onset and its end as where the series is back."""
    values = [0.05 + (k % 3) * 0.002 for k in range(60)]
    values[20:20 + width] = [0.9 + (k % 2) * 0.01 for k in range(width)]
    onset = find_onset(values)
    assert onset is not None and onset.index == 20 and onset.direction == "up"
    assert find_end(values, onset) == 20 + width


@pytest.mark.parametrize("values", [[float("inf")] * 40, [1e200] * 40, [1e300, -1e300] * 20, [1e153] * 40,
                                    [1.0] * 12 + [float("nan")] + [5.0] * 12 + [1.0] * 12])
def test_a_series_no_level_can_be_computed_from_raises_no_warning(values: list[float]) -> None:
    """Infinities (a Prometheus `+Inf` quantile), NaN, or values whose squares overflow give no
    numpy RuntimeWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        segment_boundaries(values)


def test_a_few_quiet_points_at_the_window_start_do_not_date_a_later_jump():
    # The window opens on five unusually quiet minutes, then the usual jitter, then the jump: the
    # jitter is no change (it departs only from the quiet start's tight spread), the jump is.
    quiet = [0.0006, 0.0004, 0.0023, 0.0002, 0.0006]
    jitter = [0.0016, 0.0019, 0.0014, 0.0013, 0.0042, 0.002, 0.0017, 0.0026, 0.0033, 0.0023, 0.0025, 0.0011,
              0.0022, 0.0013, 0.0022, 0.0012, 0.0018, 0.0017, 0.0018, 0.0017, 0.0033, 0.0011, 0.002, 0.0015,
              0.0021, 0.0019, 0.0014, 0.0028, 0.0022, 0.0025, 0.0023, 0.0016, 0.0017, 0.0021, 0.0019, 0.0001,
              0.0016, 0.0022, 0.0016]
    sawtooth = [0.0392, 0.0688, 0.1052, 0.1407, 0.1503, 0.0313, 0.0467, 0.1163, 0.1197, 0.1642, 0.0233, 0.0722,
                0.1079, 0.1328, 0.1598, 0.0395]
    change = find_onset(quiet + jitter + sawtooth, direction="up", min_relative=0.1)
    assert change is not None and change.index == len(quiet) + len(jitter)
