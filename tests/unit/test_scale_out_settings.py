"""Scale-out without processes: the launcher's `--replicas`, the options every channel
to a role and every server gets, and the settings behind them."""

from __future__ import annotations

import json
import os

import pytest
from pydantic import ValidationError

from gateway.launcher import Cluster, LaunchError, main, parse_replicas, replica_name
from shared.channels import Keepalive, channel_options
from shared.config import CommonSettings, ServiceSettings
from shared.server import server_options


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("ATTEST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_replicas_are_read_per_role_and_comma_separated() -> None:
    assert parse_replicas(["executor=3", "verifier=2, composer=1"]) == {"executor": 3, "verifier": 2, "composer": 1}
    assert parse_replicas([]) == {}
    assert [replica_name("executor", i) for i in range(3)] == ["executor", "executor-2", "executor-3"]


@pytest.mark.parametrize(("spec", "message"), [
    ("executor", "expected ROLE=N"),
    ("gateway=2", "the gateway is the one entry point locally"),
    ("execut0r=2", "expected ROLE=N with ROLE one of planner, executor"),
    ("executor=three", "a whole number"),
    ("executor=0", "between 1 and 16"),
    ("executor=17", "between 1 and 16"),
])
def test_a_wrong_replica_count_is_refused_with_what_is_wrong(spec, message, capsys) -> None:
    with pytest.raises(ValueError, match=message):
        parse_replicas([spec])
    with pytest.raises(SystemExit) as exited:  # the CLI: one line, exit 2, nothing started
        main(["--replicas", spec])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_gateway_dials_an_address_list_of_a_roles_replicas() -> None:
    cluster = Cluster({"ATTEST_INSECURE": "1"}, replicas={"executor": 2})
    for name, port in (("executor", 4001), ("executor-2", 4002), ("planner", 4003)):
        cluster.processes[name] = type("P", (), {"port": port, "name": name})()  # as started
    assert cluster.target("executor") == "ipv4:127.0.0.1:4001,127.0.0.1:4002"
    assert cluster.target("planner") == "127.0.0.1:4003"
    with pytest.raises(LaunchError, match="only planner, executor"):
        Cluster({"ATTEST_INSECURE": "1"}, replicas={"gateway": 2})


def _options(target: str, secure: bool) -> dict:
    return dict(channel_options(target, 1024, Keepalive(20, 10), secure=secure))


@pytest.mark.parametrize("target", ["127.0.0.1:50052", "dns:///attest-executor.attest.svc.cluster.local:50052",
                                    "ipv4:127.0.0.1:1,127.0.0.1:2"])
def test_every_channel_balances_calls_and_pings_its_connections(target) -> None:
    options = _options(target, secure=True)
    assert json.loads(options["grpc.service_config"]) == {"loadBalancingConfig": [{"round_robin": {}}]}
    assert options["grpc.keepalive_time_ms"] == 20_000 and options["grpc.keepalive_timeout_ms"] == 10_000


def test_a_tls_address_list_checks_the_certificate_against_its_first_address() -> None:
    assert _options("ipv4:127.0.0.1:1,127.0.0.1:2", secure=True)["grpc.default_authority"] == "127.0.0.1:1"
    assert "grpc.default_authority" not in _options("ipv4:127.0.0.1:1,127.0.0.1:2", secure=False)
    # A DNS name is checked against the certificate as it is.
    assert "grpc.default_authority" not in _options("dns:///attest-executor:50052", secure=True)


def test_servers_age_out_connections_with_a_grace_and_accept_the_clients_pings() -> None:
    settings = ServiceSettings(grpc_max_connection_age_seconds=45, grpc_max_connection_age_grace_seconds=75)
    options = dict(server_options(settings))
    assert options["grpc.max_connection_age_ms"] == 45_000
    assert options["grpc.max_connection_age_grace_ms"] == 75_000
    # Clients may ping every 10 s at the most; the server must not call that too many pings.
    assert options["grpc.http2.min_ping_interval_without_data_ms"] <= 10_000


def test_keepalive_settings_that_cannot_work_stop_the_process(monkeypatch) -> None:
    monkeypatch.setenv("ATTEST_GRPC_KEEPALIVE_SECONDS", "20")
    monkeypatch.setenv("ATTEST_GRPC_KEEPALIVE_TIMEOUT_SECONDS", "20")
    with pytest.raises(ValidationError, match="must be below ATTEST_GRPC_KEEPALIVE_SECONDS"):
        CommonSettings()
    monkeypatch.setenv("ATTEST_GRPC_KEEPALIVE_SECONDS", "5")  # more often than servers accept
    with pytest.raises(ValidationError, match="greater than or equal to 10"):
        CommonSettings()
    monkeypatch.delenv("ATTEST_GRPC_KEEPALIVE_SECONDS")
    monkeypatch.delenv("ATTEST_GRPC_KEEPALIVE_TIMEOUT_SECONDS")
    assert Keepalive.from_settings(CommonSettings()) == Keepalive(20.0, 10.0)


def test_the_gateway_retries_every_role_call_but_the_executors_tool_runs() -> None:
    from gateway.clients import IDEMPOTENT_METHODS

    config = json.loads(dict(channel_options("127.0.0.1:1", 1024, Keepalive(), secure=False,
                                             idempotent=IDEMPOTENT_METHODS))["grpc.service_config"])
    (method_config,) = config["methodConfig"]
    names = method_config["name"]
    assert {"service": "attest.planner.v1.PlannerService"} in names
    assert {"service": "attest.composer.v1.ComposerService"} in names
    # ExecutePlan and RunAgent write the run's tool calls: never repeated blindly (a new attempt is).
    executor = [n for n in names if n["service"] == "attest.executor.v1.ExecutorService"]
    assert executor and all(n.get("method") in ("RepairDraft", "DescribePrompts") for n in executor)
    assert method_config["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
