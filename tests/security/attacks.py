"""The attacks the security model refuses (docs/security.md), each as a function that tries it and reports what happened.

The same functions run against any Attest cluster: tests/security/test_attacks.py asserts each is
refused (TLS on, principals, limits); `python -m tests.security.attacks` runs them in plaintext
against a cluster of whatever commit is checked out and prints the outcomes, which is how each was
shown to succeed on the commit before these defences (see tests/security/README.md).

An attack "got through" when the server did the work: an OK status, or an application-level
refusal (INVALID_ARGUMENT, NOT_FOUND …) that shows the call reached the handler. Refused means
the transport or an interceptor stopped it (UNAVAILABLE from a failed handshake, UNAUTHENTICATED,
PERMISSION_DENIED), or, for the attacks on data, that the server refused the operation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from tests.estate_seed import seed_log_line

Metadata = Sequence[tuple[str, str]]
ChannelFor = Callable[[str], grpc.Channel]
TIMEOUT = 60.0
# Refusals by the transport or an interceptor: the handler never ran.
REFUSED_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED,
                           grpc.StatusCode.PERMISSION_DENIED})
# Secrets a log line may carry; none may ever be stored or shown.
SECRET_PASSWORD = "hunter2-Zq8vW3"
SECRET_BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMtYm90In0.c2lnbmF0dXJlLXNlY3JldA"
SECRET_LINE = (f"connection to jdbc:postgresql://app:{SECRET_PASSWORD}@db-primary:5432/payments failed; "
               f"retrying upstream call with Authorization: Bearer {SECRET_BEARER}")
LOG_QUESTION = "payment-service 最近一小时的错误日志里有什么？"


@dataclass(frozen=True)
class Outcome:
    """What one try did: `code` is the status (OK when it answered), `detail` what it returned."""

    code: grpc.StatusCode
    detail: str = ""

    @property
    def reached_handler(self) -> bool:
        return self.code not in REFUSED_CODES


def call(method: Callable[..., object], request: object, metadata: Metadata = (),
         timeout: float = TIMEOUT) -> tuple[Outcome, object | None]:
    try:
        response = method(request, timeout=timeout, metadata=tuple(metadata))
    except grpc.RpcError as error:
        return Outcome(error.code(), error.details() or ""), None
    return Outcome(grpc.StatusCode.OK), response


# --- 1. the internal services accept anyone --------------------------------------------------

def call_every_role(channel_for: ChannelFor) -> dict[str, Outcome]:
    """One harmless call per internal role, over whatever channel the attacker can open."""
    calls = {
        "planner.CreatePlan": lambda: call(
            planner_pb2_grpc.PlannerServiceStub(channel_for("planner")).CreatePlan,
            planner_pb2.CreatePlanRequest(run_id="x", query="payment-service 正常吗？")),
        "executor.ExecutePlan": lambda: call(
            executor_pb2_grpc.ExecutorServiceStub(channel_for("executor")).ExecutePlan,
            executor_pb2.ExecutePlanRequest(run_id="no-such-run", query="q", plan=evidence_pb2.Plan())),
        "gatekeeper.ListRules": lambda: call(
            gatekeeper_pb2_grpc.GatekeeperServiceStub(channel_for("gatekeeper")).ListRules,
            gatekeeper_pb2.ListRulesRequest()),
        "composer.ComposeAnswer": lambda: call(
            composer_pb2_grpc.ComposerServiceStub(channel_for("composer")).ComposeAnswer,
            composer_pb2.ComposeAnswerRequest()),
    }
    return {name: attempt()[0] for name, attempt in calls.items()}


# --- 2 and 3. internal RPCs that corrupt runs ------------------------------------------------

def a_plan(channel_for: ChannelFor, query: str) -> evidence_pb2.Plan:
    """A real plan from the planner (the attacker then reuses and inflates it)."""
    outcome, response = call(planner_pb2_grpc.PlannerServiceStub(channel_for("planner")).CreatePlan,
                             planner_pb2.CreatePlanRequest(run_id="x", query=query))
    if response is None:
        raise AssertionError(f"the planner did not plan: {outcome}")
    assert isinstance(response, planner_pb2.CreatePlanResponse)
    return response.plan


def inflated(plan: evidence_pb2.Plan, steps: int) -> evidence_pb2.Plan:
    bigger = evidence_pb2.Plan()
    bigger.CopyFrom(plan)
    del bigger.steps[:]
    while len(bigger.steps) < steps:
        bigger.steps.extend(plan.steps[: steps - len(bigger.steps)])
    return bigger


def execute_into(channel_for: ChannelFor, run_id: str, query: str,
                 plan: evidence_pb2.Plan) -> tuple[Outcome, executor_pb2.ExecutePlanResponse | None]:
    outcome, response = call(executor_pb2_grpc.ExecutorServiceStub(channel_for("executor")).ExecutePlan,
                             executor_pb2.ExecutePlanRequest(run_id=run_id, query=query, plan=plan, round=0))
    assert response is None or isinstance(response, executor_pb2.ExecutePlanResponse)
    return outcome, response


# --- gateway calls ---------------------------------------------------------------------------

def gateway(channel: grpc.Channel) -> gateway_pb2_grpc.GatewayServiceStub:
    return gateway_pb2_grpc.GatewayServiceStub(channel)


def diagnose(channel: grpc.Channel, metadata: Metadata, query: str = "checkout-api 现在正常吗？", *,
             mode: int = enums_pb2.DIAGNOSIS_MODE_MULTI_AGENT,
             session_id: str = "") -> tuple[Outcome, gateway_pb2.DiagnoseResponse | None]:
    outcome, response = call(gateway(channel).Diagnose,
                             gateway_pb2.DiagnoseRequest(query=query, mode=mode, session_id=session_id),
                             metadata)
    assert response is None or isinstance(response, gateway_pb2.DiagnoseResponse)
    return outcome, response


def get_run(channel: grpc.Channel, metadata: Metadata, run_id: str,
            session_id: str = "") -> tuple[Outcome, gateway_pb2.GetRunResponse | None]:
    outcome, response = call(gateway(channel).GetRun,
                             gateway_pb2.GetRunRequest(run_id=run_id, session_id=session_id), metadata)
    assert response is None or isinstance(response, gateway_pb2.GetRunResponse)
    return outcome, response


def gateway_health(channel: grpc.Channel) -> int:
    response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    return int(response.status)


def reflection_v1(channel: grpc.Channel) -> Outcome:
    """List the services through `grpc.reflection.v1` (not v1alpha)."""
    method = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=lambda data: data, response_deserializer=lambda data: data)
    # ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
    try:
        replies = list(method(iter([b"\x3a\x00"]), timeout=10))
    except grpc.RpcError as error:
        return Outcome(error.code(), error.details() or "")
    return Outcome(grpc.StatusCode.OK, f"{len(replies)} replies")


# --- secrets in the evidence -----------------------------------------------------------------

def seed_secret_log_line(estate_url: str, service: str = "payment-service") -> None:
    """A recent ERROR line of `service` that carries a password and a bearer token."""
    seed_log_line(estate_url, SECRET_LINE, service=service, ts=datetime.now(UTC) - timedelta(minutes=2),
                  host=f"{service}-7d9f-x1")


def secrets_in(text: str) -> list[str]:
    return [secret for secret in (SECRET_PASSWORD, SECRET_BEARER) if secret in text]


# --- quotas ----------------------------------------------------------------------------------

def diagnose_at_once(channel: grpc.Channel, metadata: Metadata, count: int,
                     query: str = "checkout-api 现在正常吗？") -> list[grpc.RpcError | None]:
    """`count` diagnoses started together by one caller: their errors (None for an answer)."""
    results: list[grpc.RpcError | None] = [None] * count
    barrier = threading.Barrier(count)

    def one(index: int) -> None:
        barrier.wait()
        try:
            gateway(channel).Diagnose(gateway_pb2.DiagnoseRequest(query=query), timeout=TIMEOUT,
                                      metadata=tuple(metadata))
        except grpc.RpcError as error:
            results[index] = error

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# --- the attacks in plaintext, as a script -----------------------------------------------------

def main() -> int:
    """Start a plaintext cluster of the checked-out commit and try every attack; print outcomes."""
    import json
    import os
    import tempfile
    from pathlib import Path

    from shared.db.engine import make_engine, make_session_factory
    from shared.db.run_store import RunStore
    from tests.integration.conftest import TEST_TOKEN, start_cluster
    from tests.otlp_receiver import OtlpReceiver

    token = [("authorization", f"Bearer {TEST_TOKEN}")]
    lines: list[str] = []

    def report(name: str, got_through: bool, detail: str) -> None:
        lines.append(f"{'SUCCEEDS' if got_through else 'refused '}  {name}: {detail}")
        print(lines[-1], flush=True)

    with tempfile.TemporaryDirectory() as tmp, OtlpReceiver() as receiver:
        root = Path(tmp)
        cluster = start_cluster(root, receiver.endpoint, {"ATTEST_INSECURE": "1"})
        try:
            def channel_for(role: str) -> grpc.Channel:
                return grpc.insecure_channel(cluster.address(role))

            front = grpc.insecure_channel(cluster.gateway_addr)
            for name, outcome in call_every_role(channel_for).items():
                report(f"no credential: {name}", outcome.reached_handler, outcome.code.name)
            _, done = diagnose(front, token)
            assert done is not None
            before = len(get_run(front, token, done.run_id)[1].audit["invocations"])  # type: ignore[union-attr]
            plan = a_plan(channel_for, "checkout-api 现在正常吗？")
            outcome, response = execute_into(channel_for, done.run_id, "checkout-api 现在正常吗？", plan)
            after = len(get_run(front, token, done.run_id)[1].audit["invocations"])  # type: ignore[union-attr]
            report("ExecutePlan into a finished run", after > before,
                   f"{outcome.code.name}; invocations {before} -> {after}; evidence returned: "
                   f"{bool(response and response.output_text)}")
            runs = RunStore(make_session_factory(make_engine(cluster.database_url)))
            _, open_run = runs.start_run(None, "checkout-api 现在正常吗？", "MULTI_AGENT")
            outcome, _ = execute_into(channel_for, open_run, "checkout-api 现在正常吗？", inflated(plan, 40))
            stored = get_run(front, token, open_run)[1]
            size = stored.ByteSize() if stored is not None else 0
            report("a 40-step plan", outcome.code == grpc.StatusCode.OK,
                   f"{outcome.code.name}; GetRun {size / 1e6:.1f} MB")
            outcome, _ = get_run(front, token, done.run_id, session_id="")
            report("GetRun of someone else's run without a session", outcome.code == grpc.StatusCode.OK,
                   outcome.code.name)
            for mode in (99, -1):
                outcome, answered = diagnose(front, token, mode=mode)
                report(f"mode={mode}", outcome.code == grpc.StatusCode.OK,
                       f"{outcome.code.name} {answered.status if answered else ''}")
            outcome, _ = diagnose(front, token, "checkout-api \u202e现在正常吗？")
            report("a query with U+202E", outcome.code == grpc.StatusCode.OK, outcome.code.name)
            seed_secret_log_line(f"sqlite:///{root / 'estate.db'}")
            _, answered = diagnose(front, token, LOG_QUESTION)
            assert answered is not None
            audit = get_run(front, token, answered.run_id)[1]
            shown = secrets_in(json.dumps(list(audit.audit.items()) if audit else [], default=str, ensure_ascii=False)
                               + str(audit.audit if audit else ""))
            report("a password and a token in a log line", bool(shown), f"GetRun shows {len(shown)} of 2")
            errors = diagnose_at_once(front, token, 12)
            refused = [e for e in errors if e is not None and e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
            report("12 diagnoses at once by one caller", not refused, f"{len(refused)} refused")
            outcome = reflection_v1(front)
            report("only reflection v1alpha served", outcome.code != grpc.StatusCode.OK, f"v1: {outcome.code.name}")
            cluster.processes["verifier"].process.kill()
            cluster.processes["verifier"].process.wait()
            status = gateway_health(front)
            report("gateway health with the verifier dead", status == health_pb2.HealthCheckResponse.SERVING,
                   health_pb2.HealthCheckResponse.ServingStatus.Name(status))
            purge = os.system(f"{os.sys.executable} -m gateway.cli purge --help > /dev/null 2>&1")  # type: ignore[attr-defined]
            report("no purge command", purge != 0, f"`attest purge --help` exit {purge >> 8}")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
