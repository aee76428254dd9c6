"""`attest` reaches a gateway whose public port has TLS (and one that asks for a client
certificate) with --tls-ca / --tls-cert / --tls-key; without them it speaks plaintext, and a
mismatch is a clear error, never an answer over an unverified channel."""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.cli import main
from shared.tls import certificate_files, server_credentials, write_throwaway_pki

SESSION = "5e55"


class _Runs(gateway_pb2_grpc.GatewayServiceServicer):
    def ListRuns(self, request, context):  # gRPC's name
        return gateway_pb2.ListRunsResponse(runs=[gateway_pb2.RunSummary(
            run_id="r1", query="pay-svc 正常吗？", status="COMPLETED", answer_line="在所查范围内未发现异常")])


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    write_throwaway_pki(directory, ["gateway", "frontend"])
    return certificate_files(directory, "gateway"), certificate_files(directory, "frontend")


def _serve(credentials: grpc.ServerCredentials) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(_Runs(), server)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, f"127.0.0.1:{port}"


def _runs(capsys, addr: str, *tls: str) -> tuple[int, str, str]:
    code = main(["--addr", addr, *tls, "runs", "--session", SESSION, "--json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_tls_gateway_is_reached_with_its_ca_and_refused_in_plaintext(pki, capsys, monkeypatch):
    for name in ("ATTEST_GATEWAY_TLS_CA_FILE", "ATTEST_GATEWAY_TLS_CERT_FILE", "ATTEST_GATEWAY_TLS_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    gateway, _ = pki
    server, addr = _serve(server_credentials(gateway.cert_file, gateway.key_file, None))
    try:
        code, out, _ = _runs(capsys, addr, "--tls-ca", str(gateway.ca_file))
        assert code == 0 and [run["run_id"] for run in json.loads(out)] == ["r1"]
        code, out, err = _runs(capsys, addr)  # plaintext to a TLS port: an error, no answer
        assert code == 1 and out == "" and "UNAVAILABLE" in err, err
        # The CA from the environment, as a deployment sets it.
        monkeypatch.setenv("ATTEST_GATEWAY_TLS_CA_FILE", str(gateway.ca_file))
        code, out, _ = _runs(capsys, addr)
        assert code == 0 and json.loads(out)[0]["answer_line"] == "在所查范围内未发现异常"
    finally:
        server.stop(None)


def test_a_gateway_asking_for_a_client_certificate_gets_it(pki, capsys):
    gateway, frontend = pki
    server, addr = _serve(server_credentials(gateway.cert_file, gateway.key_file, gateway.ca_file))
    try:
        code, _, err = _runs(capsys, addr, "--tls-ca", str(gateway.ca_file))
        assert code == 1 and "UNAVAILABLE" in err, err  # no client certificate: the handshake fails
        code, out, _ = _runs(capsys, addr, "--tls-ca", str(frontend.ca_file), "--tls-cert", str(frontend.cert_file),
                             "--tls-key", str(frontend.key_file))
        assert code == 0 and json.loads(out)[0]["run_id"] == "r1"
    finally:
        server.stop(None)


@pytest.mark.parametrize("options, says", [
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls-cert needs --tls-ca"),
    (["--tls-ca", "/nonexistent/ca.pem"], "cannot read the CA certificate /nonexistent/ca.pem"),
])
def test_unusable_tls_options_are_one_error_line_and_exit_2(options, says, capsys):
    code, out, err = _runs(capsys, "127.0.0.1:1", *options)
    assert code == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1, err
