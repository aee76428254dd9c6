"""Every attack the security model refuses, tried over real processes with TLS on, and refused.

Each was shown to get through, in plaintext, on the commit before these defences (47ee894): the
outcomes of `python -m tests.security.attacks` there are in tests/security/README.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from grpc_health.v1 import health_pb2
from sqlalchemy import create_engine, text

from attest.gateway.v1 import gateway_pb2
from gateway.launcher import REPO_ROOT
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.error_details import error_details
from shared.tls import write_throwaway_pki
from tests.security import attacks
from tests.security.conftest import MAX_IN_FLIGHT, identity_channel, token

pytestmark = pytest.mark.integration
QUESTION = "checkout-api 现在正常吗？"


def _channels(cluster, identity):
    opened: list[grpc.Channel] = []

    def channel_for(role: str) -> grpc.Channel:
        opened.append(identity_channel(cluster, role, identity))
        return opened[-1]

    return channel_for, opened


def _close(opened):
    for channel in opened:
        channel.close()


# --- the internal services accept anyone ------------------------------------------------------

def test_a_role_refuses_a_caller_without_tls(secure_cluster) -> None:
    channel_for, opened = _channels(secure_cluster, None)
    try:
        outcomes = attacks.call_every_role(channel_for)
    finally:
        _close(opened)
    assert all(not outcome.reached_handler for outcome in outcomes.values()), outcomes


def test_a_role_refuses_a_certificate_of_another_ca(secure_cluster, tmp_path) -> None:
    write_throwaway_pki(tmp_path, ["gateway"])  # a CA of its own: right name, wrong issuer
    opened: list[grpc.Channel] = []

    def rogue(role: str) -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=(secure_cluster.tls_dir / "ca.pem").read_bytes(),
            private_key=(tmp_path / "gateway-key.pem").read_bytes(),
            certificate_chain=(tmp_path / "gateway.pem").read_bytes())
        opened.append(grpc.secure_channel(secure_cluster.address(role), credentials))
        return opened[-1]

    try:
        outcomes = attacks.call_every_role(rogue)
    finally:
        _close(opened)
    assert all(not outcome.reached_handler for outcome in outcomes.values()), outcomes


def test_a_role_refuses_a_valid_certificate_that_is_not_the_gateways(secure_cluster) -> None:
    channel_for, opened = _channels(secure_cluster, "intruder")
    try:
        outcomes = attacks.call_every_role(channel_for)
    finally:
        _close(opened)
    assert {outcome.code for outcome in outcomes.values()} == {grpc.StatusCode.PERMISSION_DENIED}, outcomes


# --- internal RPCs cannot corrupt runs --------------------------------------------------------

def _invocations(front, principal: str, run_id: str) -> list:
    outcome, run = attacks.get_run(front, token(principal), run_id)
    assert run is not None, outcome
    return list(run.audit["invocations"])


def test_execute_plan_cannot_write_into_a_finished_run(secure_cluster, front) -> None:
    """Even with the gateway's own certificate (a compromised or confused caller)."""
    _, done = attacks.diagnose(front, token("alice"), QUESTION)
    assert done is not None and done.status == "COMPLETED"
    before = _invocations(front, "alice", done.run_id)
    channel_for, opened = _channels(secure_cluster, "gateway")
    try:
        outcome, response = attacks.execute_into(channel_for, done.run_id, QUESTION,
                                                 attacks.a_plan(channel_for, QUESTION))
    finally:
        _close(opened)
    assert outcome.code == grpc.StatusCode.FAILED_PRECONDITION, outcome
    assert response is None
    assert _invocations(front, "alice", done.run_id) == before


def test_a_plan_over_the_step_cap_is_refused_and_nothing_is_stored(secure_cluster, front) -> None:
    runs = RunStore(make_session_factory(make_engine(secure_cluster.database_url)))
    _, open_run = runs.start_run(None, QUESTION, "MULTI_AGENT")  # as the gateway opens one
    channel_for, opened = _channels(secure_cluster, "gateway")
    try:
        plan = attacks.a_plan(channel_for, QUESTION)
        outcome, response = attacks.execute_into(channel_for, open_run, QUESTION, attacks.inflated(plan, 40))
    finally:
        _close(opened)
    assert outcome.code == grpc.StatusCode.INVALID_ARGUMENT, outcome
    assert "40" in outcome.detail, outcome
    stored = runs.get_run(open_run)
    assert stored is not None and stored["invocations"] == []


# --- callers own their runs -------------------------------------------------------------------

def test_another_principals_run_is_not_found_like_an_absent_one(front) -> None:
    _, alices = attacks.diagnose(front, token("alice"), QUESTION)
    assert alices is not None
    stolen, run = attacks.get_run(front, token("bob"), alices.run_id, session_id="")
    absent, _ = attacks.get_run(front, token("bob"), "run-that-does-not-exist", session_id="")
    assert run is None
    assert stolen.code == absent.code == grpc.StatusCode.NOT_FOUND
    assert stolen.detail.replace(alices.run_id[:40], "X") == absent.detail.replace("run-that-does-not-exist", "X")
    own, mine = attacks.get_run(front, token("alice"), alices.run_id)
    assert own.code == grpc.StatusCode.OK and mine is not None and mine.audit["principal"] == "alice"


def test_another_principals_session_cannot_be_continued(front) -> None:
    _, alices = attacks.diagnose(front, token("alice"), QUESTION)
    assert alices is not None
    outcome, answered = attacks.diagnose(front, token("bob"), QUESTION, session_id=alices.session_id)
    assert answered is None and outcome.code == grpc.StatusCode.NOT_FOUND, outcome


def test_an_unknown_token_is_unauthenticated(front) -> None:
    outcome, _ = attacks.diagnose(front, [("authorization", "Bearer not-a-token")], QUESTION)
    assert outcome.code == grpc.StatusCode.UNAUTHENTICATED


# --- input hygiene ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [99, -1])
def test_an_unknown_mode_is_invalid_argument(front, mode) -> None:
    outcome, answered = attacks.diagnose(front, token("alice"), QUESTION, mode=mode)
    assert answered is None and outcome.code == grpc.StatusCode.INVALID_ARGUMENT, outcome
    assert "mode" in outcome.detail


def test_a_bidi_override_in_the_query_is_refused(front) -> None:
    outcome, answered = attacks.diagnose(front, token("alice"), "checkout-api \u202e现在正常吗？")
    assert answered is None and outcome.code == grpc.StatusCode.INVALID_ARGUMENT, outcome
    assert "U+202E" in outcome.detail


# --- secrets never stored ---------------------------------------------------------------------

def test_secrets_in_a_log_line_are_neither_stored_nor_shown(secure_cluster, front) -> None:
    attacks.seed_secret_log_line(secure_cluster.estate_url)
    _, answered = attacks.diagnose(front, token("alice"), attacks.LOG_QUESTION)
    assert answered is not None and answered.status == "COMPLETED"
    _, run = attacks.get_run(front, token("alice"), answered.run_id)
    assert run is not None
    shown = json.dumps(dict(run.audit), default=str, ensure_ascii=False) + str(run.audit) + answered.answer
    assert "REDACTED" in shown  # the line was read: redacted, not dropped
    assert attacks.secrets_in(shown) == []
    engine = create_engine(secure_cluster.database_url)
    try:
        with engine.connect() as connection:
            stored = [str(row) for table in ("tool_invocation", "orchestration_event", "diagnosis_run")
                      for row in connection.execute(text(f"SELECT * FROM {table}"))]  # noqa: S608 - fixed names
    finally:
        engine.dispose()
    assert attacks.secrets_in("\n".join(stored)) == []


def test_old_runs_are_purged(secure_cluster, front) -> None:
    _, old = attacks.diagnose(front, token("alice"), QUESTION)
    _, young = attacks.diagnose(front, token("alice"), QUESTION)
    assert old is not None and young is not None
    engine = create_engine(secure_cluster.database_url)
    long_ago = datetime.now(UTC) - timedelta(days=40)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE diagnosis_run SET created_at = :t, finished_at = :t WHERE run_id = :r"),
                               {"t": long_ago, "r": old.run_id})
    finally:
        engine.dispose()
    purge = subprocess.run([sys.executable, "-m", "gateway.cli", "purge", "--older-than", "30"], cwd=REPO_ROOT,
                           env={**os.environ, "ATTEST_DATABASE_URL": secure_cluster.database_url},
                           capture_output=True, text=True, timeout=120)
    assert purge.returncode == 0, purge.stderr
    assert attacks.get_run(front, token("alice"), old.run_id)[0].code == grpc.StatusCode.NOT_FOUND
    assert attacks.get_run(front, token("alice"), young.run_id)[0].code == grpc.StatusCode.OK


# --- quotas -----------------------------------------------------------------------------------

def test_one_caller_cannot_keep_every_role_busy(front) -> None:
    errors = attacks.diagnose_at_once(front, token("bob"), 4 * MAX_IN_FLIGHT)
    refused = [error for error in errors if error is not None]
    assert refused, "every diagnosis ran although at most two may be in flight"
    assert {error.code() for error in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    details = error_details(refused[0])
    assert details["reason"] == "QUOTA_RUNS_IN_FLIGHT" and details["retry_after_seconds"] > 0
    assert len(errors) - len(refused) >= 1  # the quota refuses the surplus, not the caller
    _, answered = attacks.diagnose(front, token("alice"), QUESTION)  # another principal is unaffected
    assert answered is not None


# --- honest health, reflection v1 -------------------------------------------------------------

def test_reflection_v1_is_served(front) -> None:
    assert attacks.reflection_v1(front).code == grpc.StatusCode.OK


def test_the_gateway_is_not_ready_while_the_verifier_is_dead(secure_cluster, front) -> None:
    verifier = secure_cluster.processes["verifier"].process
    verifier.kill()
    verifier.wait()
    try:
        assert _health_becomes(front, health_pb2.HealthCheckResponse.NOT_SERVING)
    finally:
        secure_cluster.restart("verifier")
    assert _health_becomes(front, health_pb2.HealthCheckResponse.SERVING)
    _, answered = attacks.diagnose(front, token("alice"), QUESTION)
    assert answered is not None and answered.status == "COMPLETED"


def _health_becomes(front, status: int, within_seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + within_seconds
    while time.monotonic() < deadline:
        if attacks.gateway_health(front) == status:
            return True
        time.sleep(0.5)
    return False


def test_get_run_summary_is_bounded(front) -> None:
    _, answered = attacks.diagnose(front, token("alice"), attacks.LOG_QUESTION)
    assert answered is not None
    full = attacks.gateway(front).GetRun(gateway_pb2.GetRunRequest(run_id=answered.run_id),
                                         metadata=token("alice"), timeout=30)
    summary = attacks.gateway(front).GetRun(
        gateway_pb2.GetRunRequest(run_id=answered.run_id, view=gateway_pb2.RUN_VIEW_SUMMARY),
        metadata=token("alice"), timeout=30)
    assert summary.ByteSize() < full.ByteSize() and summary.ByteSize() < 64 * 1024
