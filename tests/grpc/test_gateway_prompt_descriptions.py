"""The gateway asks the four model-backed roles which prompts they use (`PromptDescriptions`),
against real gRPC servers on ephemeral ports: once per mode, the answer
kept; a role that failed, was too slow or was down is `None` for that run (the audit says
`unknown`) and asked again at the next run."""

from __future__ import annotations

import threading

import grpc
import pytest

from attest.common.v1 import audit_pb2, enums_pb2
from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from gateway.clients import DownstreamClients, PromptDescriptions
from shared.channels import ChannelPool
from shared.config import ServiceSettings
from shared.core.contracts import PromptRef
from shared.proto_convert import spec_value
from shared.server import build_server

ROLES = {
    "planner": (planner_pb2, planner_pb2_grpc, "PlannerService"),
    "executor": (executor_pb2, executor_pb2_grpc, "ExecutorService"),
    "verifier": (verifier_pb2, verifier_pb2_grpc, "VerifierService"),
    "composer": (composer_pb2, composer_pb2_grpc, "ComposerService"),
}


class Role:
    """A role's DescribePrompts: answers with `<role>_prompt` v<mode>, or as `behaviour` says."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.asked: list[str] = []
        self.behaviour = "answer"  # answer | fail | hang
        self.release = threading.Event()

    def __call__(self, request, context):
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode)
        self.asked.append(mode)
        if self.behaviour == "fail":
            context.abort(grpc.StatusCode.INTERNAL, "the engine is broken")
        if self.behaviour == "hang":
            self.release.wait(10)
        module = ROLES[self.role][0]
        return module.DescribePromptsResponse(provider="openai", prompts=[
            audit_pb2.PromptRef(role=self.role, name=f"{self.role}_prompt", version=mode)])


@pytest.fixture()
def cluster():
    """The four roles on ephemeral ports (DescribePrompts only), and the gateway's clients."""
    roles, servers = {}, []
    addresses = {"gatekeeper": "127.0.0.1:1"}  # never asked
    for role, (module, module_grpc, service) in ROLES.items():
        fake = roles[role] = Role(role)
        servicer_class = getattr(module_grpc, f"{service}Servicer")
        servicer = type(f"Fake{service}", (servicer_class,), {"DescribePrompts": lambda self, r, c, f=fake: f(r, c)})()
        add = getattr(module_grpc, f"add_{service}Servicer_to_server")
        running = build_server(service_name=role, settings=ServiceSettings(port=0),
                               register=lambda server, a=add, s=servicer: a(s, server),
                               service_names=[module.DESCRIPTOR.services_by_name[service].full_name])
        servers.append(running)
        addresses[role] = f"127.0.0.1:{running.port}"
    pool = ChannelPool()
    yield roles, addresses, pool
    for fake in roles.values():
        fake.release.set()
    pool.close()
    for running in servers:
        running.stop(None)


def _names(reported):
    return {role: None if prompts is None else [(p.role, p.name, p.version) for p in prompts]
            for role, prompts in reported.items()}


def test_each_role_is_asked_once_per_mode_and_the_answer_is_kept(cluster):
    roles, addresses, pool = cluster
    prompts = PromptDescriptions(DownstreamClients(pool, **addresses))
    first = prompts.start("MULTI_AGENT")()
    assert _names(first) == {role: [(role, f"{role}_prompt", "MULTI_AGENT")] for role in ROLES}
    assert all(isinstance(p, PromptRef) for listed in first.values() for p in listed)
    assert _names(prompts.start("MULTI_AGENT")()) == _names(first)
    assert _names(prompts.start("SINGLE_REACT")())["executor"] == [("executor", "executor_prompt", "SINGLE_REACT")]
    assert {role: fake.asked for role, fake in roles.items()} == {
        role: ["MULTI_AGENT", "SINGLE_REACT"] for role in ROLES}


def test_a_role_that_failed_is_unknown_for_that_run_and_asked_again_at_the_next(cluster):
    roles, addresses, pool = cluster
    prompts = PromptDescriptions(DownstreamClients(pool, **addresses))
    roles["verifier"].behaviour = "fail"
    first = prompts.start("MULTI_AGENT")()
    assert first["verifier"] is None and first["planner"] == [PromptRef(role="planner", name="planner_prompt",
                                                                        version="MULTI_AGENT")]
    roles["verifier"].behaviour = "answer"
    second = prompts.start("MULTI_AGENT")()
    assert _names(second)["verifier"] == [("verifier", "verifier_prompt", "MULTI_AGENT")]
    assert roles["verifier"].asked == ["MULTI_AGENT", "MULTI_AGENT"] and roles["planner"].asked == ["MULTI_AGENT"]


def test_a_slow_role_is_unknown_within_the_deadline(cluster):
    roles, addresses, pool = cluster
    prompts = PromptDescriptions(DownstreamClients(pool, **addresses), timeout_seconds=0.3)
    roles["composer"].behaviour = "hang"
    reported = prompts.start("MULTI_AGENT")()
    assert reported["composer"] is None and reported["executor"] is not None
    roles["composer"].behaviour = "answer"
    roles["composer"].release.set()
    assert prompts.start("MULTI_AGENT")()["composer"] is not None


def test_a_role_that_is_down_is_unknown(cluster):
    roles, addresses, pool = cluster
    prompts = PromptDescriptions(DownstreamClients(pool, **{**addresses, "planner": "127.0.0.1:1"}))
    reported = prompts.start("MULTI_AGENT")()
    assert reported["planner"] is None and reported["verifier"] is not None
