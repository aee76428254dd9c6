"""The run audit writes its orchestration events in batches, without losing or reordering any."""

from __future__ import annotations

import pytest

from gateway import progress_events as events
from gateway.audit import RunAudit
from gateway.progress_events import PROGRESS_KEY
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.run_store import ConcurrentWriteError, RunStore


@pytest.fixture()
def runs(tmp_path):
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield RunStore(make_session_factory(engine))
    engine.dispose()


def _logged(runs: RunStore, run_id: str) -> list[tuple[int, str, str]]:
    return [(e["seq"], e["node"], e["phase"]) for e in runs.get_run(run_id)["events"]]


def test_an_enter_writes_it_and_everything_before_it(runs):
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    emitted = []
    audit = RunAudit(runs, run_id, lambda *args: emitted.append(args))
    audit.rounds = 1
    audit.event("planner", "ENTER", "NORMAL", typed=events.planner_enter("NORMAL"), kind="planning")
    assert _logged(runs, run_id) == [(1, "planner", "ENTER")]  # durable before the planner is called

    audit.event("planner", "EXIT", "OK", typed=events.planner_exit(3, ["a-svc"]), kind="planning")
    assert _logged(runs, run_id) == [(1, "planner", "ENTER")]  # held until the next write point
    assert [e.seq for (e,) in emitted] == [1, 2]  # the client's progress stream is not held back

    audit.event("executor", "ENTER", "", typed=events.executor_enter(3))
    assert _logged(runs, run_id) == [(1, "planner", "ENTER"), (2, "planner", "EXIT"), (3, "executor", "ENTER")]
    assert [(e.seq, e.code) for (e,) in emitted] == [(1, "PLANNER_ENTER"), (2, "PLANNER_EXIT_OK"), (3, "EXECUTOR_ENTER")]


def test_a_new_run_numbers_its_events_from_one_without_reading_the_log(runs):
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    emitted = []
    audit = RunAudit(runs, run_id, emitted.append, new_run=True)
    audit.event("gateway", "INFO", "STARTED", typed=events.started("MULTI_AGENT"), kind="started", round_=0)
    assert _logged(runs, run_id) == [] and [e.seq for e in emitted] == [1]  # streamed at once, written with the next
    audit.event("planner", "ENTER", "NORMAL", typed=events.planner_enter("NORMAL"), kind="planning")
    assert _logged(runs, run_id) == [(1, "gateway", "INFO"), (2, "planner", "ENTER")]


def test_the_last_write_of_a_run_flushes_the_rest(runs):
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    audit = RunAudit(runs, run_id, lambda *args: None)
    audit.rounds = 1
    audit.event("composer", "ENTER", "PASS", typed=events.composer_enter("PASS"))
    audit.event("composer", "EXIT", "OK", typed=events.answer_composed("PASS", False), kind="answer")
    audit.event("fallback", "INFO", "edge", "reason", typed=events.fallback("PRE_VERIFICATION"),
                payload={"fallback_type": "PRE_VERIFICATION"})
    audit.prepare_verifier_evaluation()
    assert _logged(runs, run_id) == [(1, "composer", "ENTER")]  # nothing more is written before the end
    audit.finish_run(status="FALLBACK", fallback_type="PRE_VERIFICATION")
    run = runs.get_run(run_id)
    assert _logged(runs, run_id) == [(1, "composer", "ENTER"), (2, "composer", "EXIT"), (3, "fallback", "INFO")]
    payload = dict(run["events"][2]["payload"])
    assert payload.pop(PROGRESS_KEY)["code"] == "FALLBACK_PRE_VERIFICATION"  # the typed part
    assert payload == {"round": 0, "fallback_type": "PRE_VERIFICATION"}
    assert "verifier_evaluation" in run["self_evaluation"] and run["status"] == "FALLBACK"


def test_a_failed_last_write_keeps_its_events_for_the_next_flush(runs, monkeypatch):
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    audit = RunAudit(runs, run_id, lambda *args: None)
    audit.rounds = 1
    audit.event("composer", "ENTER", "PASS", typed=events.composer_enter("PASS"))
    audit.event("composer", "EXIT", "OK", typed=events.answer_composed("PASS", False), kind="answer")
    audit.prepare_verifier_evaluation()

    def down(*args, **kwargs):
        raise OSError("database unavailable")

    with monkeypatch.context() as patched:
        patched.setattr(runs, "_set_run", down)
        with pytest.raises(OSError):
            audit.finish_run(status="COMPLETED")
    run = runs.get_run(run_id)
    assert run["status"] == "RUNNING" and "verifier_evaluation" not in (run["self_evaluation"] or {})
    assert _logged(runs, run_id) == [(1, "composer", "ENTER")]  # the transaction wrote nothing
    audit.flush_events()
    assert _logged(runs, run_id) == [(1, "composer", "ENTER"), (2, "composer", "EXIT")]


def test_a_replayed_event_is_the_streamed_event(runs):
    """GetRun rebuilds each event from its stored row: seq, time, kind, code, text and details as streamed."""
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    emitted = []
    audit = RunAudit(runs, run_id, emitted.append)
    audit.rounds = 1
    audit.event("gateway", "INFO", "STARTED", typed=events.started("MULTI_AGENT"), kind="started", round_=0)
    audit.event("gatekeeper", "EXIT", "pass", "ceiling PASS", typed=events.gatekeeper_exit("pass", "PASS", []),
                kind="gatekeeper", payload={"verdict_ceiling": "PASS", "failed_rules": [], "nested": {"dropped": 1}})
    audit.flush_events()
    replayed = [events.to_progress_event(row) for row in runs.get_run(run_id)["events"]]
    assert replayed == emitted
    assert emitted[1].message_zh == "引用核验：上限 PASS，未通过规则 0 条"
    assert emitted[1].gatekeeper.verdict_ceiling and emitted[1].create_time.seconds > 0
    assert "nested" not in emitted[1].details and emitted[1].details["verdict_ceiling"] == "PASS"


def test_events_that_carry_their_seq_are_never_renumbered(runs):
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    runs.record_events(run_id, [{"node": "a", "phase": "INFO", "seq": 1}])
    with pytest.raises(ConcurrentWriteError):
        runs.record_events(run_id, [{"node": "b", "phase": "INFO", "seq": 1}])
    assert _logged(runs, run_id) == [(1, "a", "INFO")]
