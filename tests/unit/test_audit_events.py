"""The run audit writes its orchestration events in batches, without losing or reordering any."""

from __future__ import annotations

import pytest

from gateway.audit import RunAudit
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore


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
    audit.event("planner", "ENTER", "NORMAL", kind="planning")
    assert _logged(runs, run_id) == [(1, "planner", "ENTER")]  # durable before the planner is called

    audit.event("planner", "EXIT", "OK", kind="planning")
    assert _logged(runs, run_id) == [(1, "planner", "ENTER")]  # held until the next write point
    assert len(emitted) == 2  # the client's progress stream is not held back

    audit.event("executor", "ENTER", "")
    assert _logged(runs, run_id) == [(1, "planner", "ENTER"), (2, "planner", "EXIT"), (3, "executor", "ENTER")]


def test_the_last_write_of_a_run_flushes_the_rest(runs):
    run_id = runs.create_run(runs.create_session(), "q", "MULTI_AGENT")
    audit = RunAudit(runs, run_id, lambda *args: None)
    audit.rounds = 1
    audit.event("composer", "ENTER", "PASS")
    audit.event("composer", "EXIT", "OK", kind="answer")
    audit.event("fallback", "INFO", "edge", "reason", payload={"fallback_type": "PRE_VERIFICATION"})
    audit.persist_verifier_evaluation()
    run = runs.get_run(run_id)
    assert _logged(runs, run_id) == [(1, "composer", "ENTER"), (2, "composer", "EXIT"), (3, "fallback", "INFO")]
    assert run["events"][2]["payload"] == {"round": 0, "fallback_type": "PRE_VERIFICATION"}
    assert "verifier_evaluation" in run["self_evaluation"]
