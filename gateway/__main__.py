"""Gateway process: wiring only."""

import sys
from concurrent.futures import ThreadPoolExecutor

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.clients import IDEMPOTENT_METHODS, DownstreamClients, PromptDescriptions
from gateway.diagnosis_metrics import DiagnosisMetrics
from gateway.downstream_health import downstream_checks
from gateway.graph import DiagnosisGraph
from gateway.run_reaper import RunKeeper
from gateway.servicer import GatewayServicer
from shared.channels import ChannelPool, Keepalive
from shared.config import GatewaySettings
from shared.db.engine import traced_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.interceptors import BearerAuthInterceptor
from shared.local_time import LocalTimeDisplay
from shared.principals import TokenFileError, load_principal_tokens
from shared.server import RunningServer, run_service
from shared.transport_security import client_credentials, gateway_public_transport


def build_servicer(settings: GatewaySettings, tracer_provider: TracerProvider,
                   meter_provider: MeterProvider) -> GatewayServicer:
    sessions = traced_session_factory(settings.database_url, tracer_provider)
    runs = RunStore(sessions)
    pool = ChannelPool(tracer_provider=tracer_provider, max_message_bytes=settings.max_message_bytes,
                       credentials=client_credentials(settings), keepalive=Keepalive.from_settings(settings),
                       idempotent=IDEMPOTENT_METHODS)
    clients = DownstreamClients(
        pool,
        planner=settings.planner_addr,
        executor=settings.executor_addr,
        gatekeeper=settings.gatekeeper_addr,
        verifier=settings.verifier_addr,
        composer=settings.composer_addr,
    )
    # Audit channels that need not delay the answer are written on a small pool of their own.
    background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gateway-audit")
    graph = DiagnosisGraph(clients, runs, InvocationStore(sessions), background,
                           metrics=DiagnosisMetrics(meter_provider), display=LocalTimeDisplay(settings.time_zone))
    keeper = RunKeeper(runs, reap_after_seconds=settings.run_reap_after_seconds,
                       heartbeat_seconds=settings.run_heartbeat_seconds)
    return GatewayServicer(graph, runs, settings, prompts=PromptDescriptions(clients), keeper=keeper)


def keep_runs(keeper: RunKeeper, running: RunningServer) -> None:
    """Once serving: reap what an earlier process left and start the heartbeats; a store that
    refuses writes is reported at once; SIGTERM drains the runs in flight before the server stops."""
    if running.readiness is not None:
        keeper.on_store_change = running.readiness.check_now
    running.on_stop = keeper.drain
    keeper.start()


def auth_interceptor(settings: GatewaySettings) -> BearerAuthInterceptor:
    """Bearer tokens → principals; a token file that cannot be used ends the process in one line."""
    try:
        tokens = load_principal_tokens(settings.auth_token, settings.auth_tokens_file)
    except TokenFileError as exc:
        print(f"error: gateway: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    return BearerAuthInterceptor(tokens)


def main() -> None:
    settings = GatewaySettings()
    built: list[GatewayServicer] = []  # the one servicer, for the hooks that run once it serves

    def build(tracer_provider: TracerProvider, meter_provider: MeterProvider) -> GatewayServicer:
        built.append(build_servicer(settings, tracer_provider, meter_provider))
        return built[0]

    run_service(
        service_name="gateway",
        settings=settings,
        service=gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"],
        add_servicer=gateway_pb2_grpc.add_GatewayServiceServicer_to_server,
        build_servicer=build,
        extra_interceptors=[auth_interceptor(settings)],
        databases=[settings.database_url],
        # Public port plaintext or TLS; the roles are reached with the gateway's certificate.
        transport=lambda: gateway_public_transport(settings),
        # The audit store taking writes is part of readiness (a full or read-only store: NOT_SERVING).
        readiness_checks=lambda: {**downstream_checks(settings), "audit store writes": built[0].keeper.readiness_check},
        on_serving=lambda running: keep_runs(built[0].keeper, running),
    )


if __name__ == "__main__":
    main()
