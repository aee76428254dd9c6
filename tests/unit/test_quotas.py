"""Per-principal quotas: what one caller may start, under a fake clock."""

from __future__ import annotations

import threading

import pytest

from gateway.quotas import PrincipalQuotas
from shared.errors import ResourceExhausted


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_runs_in_flight_are_limited_per_principal_and_given_back_however_a_run_ends():
    quotas = PrincipalQuotas(max_in_flight=2, max_per_minute=100, busy_retry_seconds=5.0, clock=FakeClock())
    with quotas.run_slot("alice"), quotas.run_slot("alice"):
        with pytest.raises(ResourceExhausted) as refused:
            with quotas.run_slot("alice"):
                pass
        assert "at most 2 at once" in str(refused.value)
        assert "max_runs_in_flight_per_principal" in str(refused.value)
        assert refused.value.retry_after_seconds == 5.0
        with quotas.run_slot("bob"):
            assert quotas.in_flight("bob") == 1, "another caller has slots of its own"
    assert quotas.in_flight("alice") == 0

    class Boom(Exception):
        pass

    with pytest.raises(Boom), quotas.run_slot("alice"):
        raise Boom
    with pytest.raises(KeyboardInterrupt), quotas.run_slot("alice"):
        raise KeyboardInterrupt  # like errors.Cancelled, a BaseException
    assert quotas.in_flight("alice") == 0


def test_runs_per_minute_are_limited_with_the_time_until_one_frees_up():
    clock = FakeClock()
    quotas = PrincipalQuotas(max_in_flight=10, max_per_minute=3, busy_retry_seconds=5.0, clock=clock)
    for _ in range(3):
        with quotas.run_slot("alice"):
            clock.now += 10.0
    with pytest.raises(ResourceExhausted) as refused:
        with quotas.run_slot("alice"):
            pass
    assert "at most 3 per minute" in str(refused.value)
    # The first start was at 1000 and the window is 60 s: it frees up at 1060, now is 1030.
    assert refused.value.retry_after_seconds == pytest.approx(30.0)
    clock.now += 30.0
    with quotas.run_slot("alice"):
        pass
    assert quotas.in_flight("alice") == 0


def test_refused_runs_do_not_count_against_the_minute():
    clock = FakeClock()
    quotas = PrincipalQuotas(max_in_flight=1, max_per_minute=2, busy_retry_seconds=1.0, clock=clock)
    with quotas.run_slot("alice"):
        for _ in range(5):
            with pytest.raises(ResourceExhausted, match="at once"):
                with quotas.run_slot("alice"):
                    pass
    with quotas.run_slot("alice"):
        pass


def test_concurrent_callers_never_exceed_the_limit():
    quotas = PrincipalQuotas(max_in_flight=3, max_per_minute=10_000, busy_retry_seconds=1.0)
    peak = 0
    admitted = 0
    lock = threading.Lock()
    start = threading.Barrier(16)

    def worker() -> None:
        nonlocal peak, admitted
        start.wait()
        for _ in range(50):
            try:
                with quotas.run_slot("alice"):
                    with lock:
                        admitted += 1
                        peak = max(peak, quotas.in_flight("alice"))
            except ResourceExhausted:
                pass

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted > 0 and peak <= 3
    assert quotas.in_flight("alice") == 0
