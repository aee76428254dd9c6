"""The scenario evaluation in `make test`: every case of tests/scenarios/cases/
is asked once in each mode against the six real services over the held-out scenario estate (one
cluster for the module), and every case must hold in each mode: its outcome, its opening, answer
and confirmed words, and its `issue15` rules (the first line answers the question, the outcome it
expects, words the answer must or must not contain).
"""

from __future__ import annotations

import pytest

from tests.eval.scenario_eval import (
    MODE_SHORT,
    MODES,
    load_cases,
    run_evaluation,
    score,
    score_lines,
    table,
)

pytestmark = pytest.mark.integration

CASES = load_cases()
RUNS = [(case.id, mode) for case in CASES for mode in MODES]


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory, new_database):
    root = tmp_path_factory.mktemp("scenario-eval")
    result = run_evaluation(CASES, root, database_url=new_database(root))
    # Shown with -s, and in the captured output of any failure below.
    print("\n" + table(result.results) + "\n" + "\n".join(score_lines(score(result.results))))
    return result


def test_every_case_ran_in_both_modes_in_its_own_session(evaluation):
    assert [(r.case_id, r.mode) for r in evaluation.results] == [(c.id, m) for c in CASES for m in MODES]
    broken = [f"{r.case_id} [{MODE_SHORT[r.mode]}]: {r.got}" for r in evaluation.results if r.got.startswith("RPC_ERROR")]
    assert not broken, "the gateway failed instead of answering:\n" + "\n".join(broken)
    sessions = [r.session_id for r in evaluation.results]
    assert all(sessions) and len(set(sessions)) == len(sessions), "each question is asked in a fresh session"
    assert not evaluation.dead_processes, f"services exited during the evaluation: {evaluation.dead_processes}"


@pytest.mark.parametrize("case_id, mode", RUNS, ids=[f"{c}-{MODE_SHORT[m]}" for c, m in RUNS])
def test_case_holds(evaluation, case_id, mode):
    result = evaluation.result(case_id, mode)
    assert result.holds, "\n" + result.explain()
