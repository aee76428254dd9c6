"""Fixtures of the gRPC tests: a scripted model served over real HTTP, each role's real gRPC server
(`shared.server.build_server`) on an ephemeral port or its servicer in process (grpcio-testing),
and what an executor needs: a SQLite audit store and the demo estate's tools."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from attest.gateway.v1 import gateway_pb2_grpc
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from services.executor.estate import load_estate
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.registry import ToolRegistry, build_default_registry
from services.planner.servicer import PlannerServicer, build_planner
from shared.config import ExecutorSettings, ModelSettings, PlannerSettings, ServiceSettings
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.interceptors import BearerAuthInterceptor
from shared.model_client import OpenAIChatClient
from shared.principals import PrincipalTokens, token_digest
from shared.server import build_server
from tests.grpc.in_process import InProcessStub
from tests.scripted_model_server import ScriptedModelServer

REPO_ROOT = Path(__file__).resolve().parents[2]
# The demo estate's "now": its incident runs over the hour before.
DEMO_ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)

# Each role's generated modules: the one service in *_pb2, its add_*_to_server and stub in *_pb2_grpc.
ROLE_PROTOS: dict[str, tuple[Any, Any]] = {
    "planner": (planner_pb2, planner_pb2_grpc),
    "executor": (executor_pb2, executor_pb2_grpc),
    "gatekeeper": (gatekeeper_pb2, gatekeeper_pb2_grpc),
    "verifier": (verifier_pb2, verifier_pb2_grpc),
    "composer": (composer_pb2, composer_pb2_grpc),
}


@contextmanager
def _gateway_server(servicer: Any, settings: ServiceSettings, tokens: dict[str, str]) -> Iterator[Any]:
    """(A GatewayServiceStub, the port) of `servicer` on the gateway's real server (build_server, the error
    interceptor) behind bearer auth with `tokens` (principal -> token), stopped on leaving."""
    auth = BearerAuthInterceptor(PrincipalTokens({p: token_digest(t) for p, t in tokens.items()}))
    running = build_server(service_name="gateway", settings=settings, extra_interceptors=[auth],
                           register=lambda server: gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server),
                           service_names=["attest.gateway.v1.GatewayService"])
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield gateway_pb2_grpc.GatewayServiceStub(channel), running.port
    finally:
        channel.close()
        running.stop(None)


@contextmanager
def _role_server(role: str, servicer: Any, settings: ServiceSettings) -> Iterator[Any]:
    pb2, pb2_grpc = ROLE_PROTOS[role]
    (service,) = pb2.DESCRIPTOR.services_by_name.values()
    add = getattr(pb2_grpc, f"add_{service.name}Servicer_to_server")
    running = build_server(service_name=role, settings=settings,
                           register=lambda server: add(servicer, server), service_names=[service.full_name])
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield getattr(pb2_grpc, f"{service.name}Stub")(channel)
    finally:
        channel.close()
        running.stop(None)


@pytest.fixture(scope="session")
def gateway_server() -> Callable[[Any, ServiceSettings, dict[str, str]], AbstractContextManager[Any]]:
    """`with gateway_server(servicer, settings, tokens) as (stub, port):` a GatewayServicer on the
    gateway's real server behind bearer auth, as `attest-gateway` serves it."""
    return _gateway_server


@pytest.fixture(scope="session")
def role_server() -> Callable[[str, Any, ServiceSettings], AbstractContextManager[Any]]:
    """`with role_server(role, servicer, settings) as stub:` the role's real server with `servicer`
    on an ephemeral port (settings.port is 0), stopped on leaving. For fixtures of any scope."""
    return _role_server


@pytest.fixture()
def serve_role(role_server) -> Iterator[Callable[[str, Any, ServiceSettings], Any]]:
    """`serve_role(role, servicer, settings)` -> a stub of the role's real server; every server
    the test started is stopped after it."""
    with ExitStack() as stack:
        yield lambda role, servicer, settings: stack.enter_context(role_server(role, servicer, settings))


@pytest.fixture(scope="session")
def in_process() -> Callable[[str, Any], InProcessStub]:
    """`in_process(role, servicer)` -> a stub-shaped caller of the servicer through grpcio-testing:
    no port, no channel, no interceptors (tests/grpc/in_process.py). For what a servicer answers;
    status mapping and the other interceptors are tested over `serve_role`."""

    def start(role: str, servicer: Any) -> InProcessStub:
        pb2, _ = ROLE_PROTOS[role]
        (service,) = pb2.DESCRIPTOR.services_by_name.values()
        return InProcessStub(service, servicer)

    return start


@pytest.fixture()
def model_server() -> Iterator[ScriptedModelServer]:
    """An OpenAI-compatible model over real HTTP: it answers what the test adds, in order, and
    records every request it got."""
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture()
def scripted_settings(model_server) -> Callable[..., ModelSettings]:
    """`scripted_settings(**overrides)` -> ModelSettings of the OpenAI-compatible provider at the
    scripted model: model "scripted-model", a 10 s timeout, anything else as given."""

    def settings(**overrides: Any) -> ModelSettings:
        values: dict[str, Any] = {"model": "scripted-model", "timeout_seconds": 10.0, **overrides}
        return ModelSettings(provider="openai", base_url=model_server.base_url, **values)

    return settings


@pytest.fixture()
def planner(scripted_settings, serve_role) -> Callable[..., Any]:
    """`planner(**model_settings)` -> a stub of a planner whose model is the scripted one."""

    def start(**overrides: Any) -> Any:
        settings = scripted_settings(**overrides)
        return serve_role("planner", PlannerServicer(build_planner(settings, OpenAIChatClient(settings))),
                          PlannerSettings(port=0))

    return start


@pytest.fixture()
def stores(tmp_path) -> Iterator[tuple[RunStore, InvocationStore]]:
    """(RunStore, InvocationStore) over a new SQLite file at the latest schema."""
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    yield RunStore(factory), InvocationStore(factory)
    engine.dispose()


@pytest.fixture(scope="module")
def demo_backends(tmp_path_factory):
    """The tools' backends over the demo estate (demo/estate), loaded up to DEMO_ANCHOR."""
    url = f"sqlite:///{tmp_path_factory.mktemp('estate') / 'estate.db'}"
    load_estate(url, REPO_ROOT / "demo" / "estate", anchor=DEMO_ANCHOR)
    return build_backends(ExecutorSettings(estate_database_url=url))


@pytest.fixture(scope="module")
def demo_registry(demo_backends) -> ToolRegistry:
    """The default tool registry over `demo_backends`."""
    return build_default_registry(demo_backends)
