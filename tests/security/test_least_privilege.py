"""No role holds another's secrets, the gateway talks only to the role it meant to reach, and the
audit store is readable by its owner only.

- The environment of every real process of a running cluster (/proc/<pid>/environ), of every
  role's compose service and of every role's Kubernetes Deployment carries only the ATTEST_
  settings that role reads (shared/role_environment.py): the bearer token only in the gateway,
  the audit store's URL only in the gateway, executor and gatekeeper, the estate only in the
  executor, each role's own TLS key only.
- A server holding another role's certificate (or any other identity the CA signed) on the
  address the gateway dials as the planner is refused at the TLS handshake.
- The SQLite audit store (and its -wal/-shm files) is 0600 after a migration and after a run.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import HealthServicer

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from gateway.clients import DownstreamClients
from gateway.launcher import REPO_ROOT
from shared.channels import ChannelPool
from shared.db.engine import make_engine
from shared.db.migrate import upgrade
from shared.role_environment import (
    AUDIT_STORE_ROLES,
    EXTRA_PREFIXES,
    ROLES,
    environment_for,
    foreign_variables,
    role_variables,
)
from shared.tls import files_channel_credentials, write_throwaway_pki
from tests.security.conftest import token

DEPLOY = REPO_ROOT / "deploy"
GATEWAY_ONLY = ("ATTEST_AUTH_TOKEN", "ATTEST_AUTH_TOKENS_FILE")
EXECUTOR_ONLY = ("ATTEST_ESTATE_DATABASE_URL",)
AUDIT_STORE = "ATTEST_DATABASE_URL"
SQLITE_FILES = ("", "-wal", "-shm", "-journal")


def _misplaced(role: str, names: set[str]) -> list[str]:
    """The secrets among `names` that `role` must not hold, and every ATTEST_ name it does not read."""
    upper = {name.upper() for name in names}
    wrong = [name for name in GATEWAY_ONLY if name in upper and role != "gateway"]
    wrong += [name for name in EXECUTOR_ONLY if name in upper and role != "executor"]
    if AUDIT_STORE in upper and role not in AUDIT_STORE_ROLES:
        wrong.append(AUDIT_STORE)
    return sorted(set(wrong) | set(foreign_variables(role, names)))


# --- the launcher: real processes -----------------------------------------------------------------


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode("utf-8", "replace").partition("=")[::2] for item in raw.split(b"\0") if item)


@pytest.mark.integration
def test_each_process_of_a_running_cluster_holds_only_its_roles_settings(secure_cluster) -> None:
    """The cluster was started with the gateway's tokens file, a token, the audit store's URL and
    the estate's in the launcher's environment: each went to the roles that read it only."""
    seen: dict[str, dict[str, str]] = {}
    for role in ROLES:
        for service in secure_cluster.replicas(role) if role != "gateway" else [secure_cluster.processes["gateway"]]:
            assert service.process.poll() is None, f"{service.name} is not running"
            env = _environ(service.process.pid)
            seen[service.name] = env
            assert _misplaced(role, set(env)) == [], f"{service.name} holds {_misplaced(role, set(env))}"
            # Its own certificate's key, and no path to another role's key anywhere in its environment.
            assert env["ATTEST_TLS_KEY_FILE"].endswith(f"/{role}-key.pem"), env["ATTEST_TLS_KEY_FILE"]
            others = [other for other in (*ROLES, "intruder") if other != role
                      and any(value.endswith(f"/{other}-key.pem") for value in env.values())]
            assert others == [], f"{service.name} can find the keys of {others}"
    # What each role needs did arrive (the cluster answers; this says where it came from).
    assert seen["gateway"]["ATTEST_AUTH_TOKENS_FILE"]
    for role in AUDIT_STORE_ROLES:
        assert seen[role][AUDIT_STORE] == secure_cluster.database_url
    assert seen["executor"]["ATTEST_ESTATE_DATABASE_URL"] == secure_cluster.estate_url


# --- compose and Kubernetes: the files as shipped ------------------------------------------------


def _env_file_names(path: Path) -> set[str]:
    path = path if path.is_file() else path.with_name(path.name + ".example")
    return {line.split("=", 1)[0].strip() for line in path.read_text().splitlines()
            if "=" in line and not line.lstrip().startswith("#")}


def test_each_compose_service_names_only_its_roles_settings() -> None:
    compose_dir = DEPLOY / "compose"
    services = yaml.safe_load((compose_dir / "docker-compose.yml").read_text())["services"]
    key_volumes: dict[str, str] = {}
    for role in ROLES:
        service = services[role]
        environment = service.get("environment") or {}
        names = set(environment)
        entries = service.get("env_file") or []
        for entry in [entries] if isinstance(entries, (str, dict)) else entries:
            names |= _env_file_names(compose_dir / (entry["path"] if isinstance(entry, dict) else entry))
        assert _misplaced(role, names) == [], f"compose service {role!r} gets {_misplaced(role, names)}"
        for secret in (*GATEWAY_ONLY, AUDIT_STORE):
            value = environment.get(secret)
            assert value is None or str(value).startswith("${"), f"{role}: {secret} is written in the file"
        key_dir = environment["ATTEST_TLS_KEY_FILE"].rsplit("/", 1)[0]
        (volume,) = [str(m).split(":")[0] for m in service.get("volumes") or [] if str(m).split(":")[1] == key_dir]
        key_volumes[role] = volume
    assert len(set(key_volumes.values())) == len(ROLES), f"roles share a certificate volume: {key_volumes}"
    assert "ATTEST_AUTH_TOKEN" in services["gateway"]["environment"]


def _k8s_docs() -> list[dict]:
    return [doc for path in sorted((DEPLOY / "k8s" / "base").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_each_kubernetes_deployment_gets_only_its_roles_settings_and_secrets() -> None:
    docs = _k8s_docs()
    data = {(doc["kind"], doc["metadata"]["name"]): {**(doc.get("data") or {}), **(doc.get("stringData") or {})}
            for doc in docs if doc["kind"] in ("ConfigMap", "Secret")}
    certificates = {doc["spec"]["secretName"]: doc["spec"] for doc in docs if doc["kind"] == "Certificate"}
    deployments = {doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc
                   for doc in docs if doc["kind"] == "Deployment"}
    assert set(deployments) == set(ROLES)
    for role, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            names = {item["name"] for item in container.get("env") or []}
            for source in container.get("envFrom") or []:
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if key in source:
                        names |= set(data[(kind, source[key]["name"])])
            assert _misplaced(role, names) == [], f"Deployment {role}: {_misplaced(role, names)}"
            for item in container.get("env") or []:
                ref = (item.get("valueFrom") or {}).get("secretKeyRef")
                if ref:  # a key of a Secret that exists and holds that very setting
                    assert ref["key"] in data[("Secret", ref["name"])], item
        mounted = [volume["secret"]["secretName"] for volume in pod.get("volumes") or [] if "secret" in volume]
        identities = [uri for name in mounted if name in certificates for uri in certificates[name]["uris"]]
        assert identities == [f"spiffe://attest/{role}"], f"Deployment {role} mounts {identities}"
        # The name the gateway requires of this role's server, in this role's certificate only.
        holders = [spec["uris"][0] for spec in certificates.values() if role in spec.get("dnsNames", [])]
        assert holders == [f"spiffe://attest/{role}"], holders


def test_deploy_check_refuses_a_role_given_another_roles_secret(tmp_path: Path) -> None:
    """`make deploy-check` fails on a planner given the audit store's URL, and on compose handing
    the gateway's token to every role through one env file."""
    import shutil

    target = tmp_path / "deploy"
    shutil.copytree(DEPLOY, target, ignore=shutil.ignore_patterns("attest.env", "__pycache__"))
    planner = target / "k8s" / "base" / "planner.yaml"
    docs = list(yaml.safe_load_all(planner.read_text()))
    docs[0]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": AUDIT_STORE, "valueFrom": {"secretKeyRef": {"name": "attest-audit-store", "key": AUDIT_STORE}}})
    planner.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    compose = target / "compose" / "docker-compose.yml"
    spec = yaml.safe_load(compose.read_text())
    spec["services"]["verifier"]["env_file"] = [{"path": "attest.env", "required": True}]
    compose.write_text(yaml.safe_dump(spec, sort_keys=False))

    done = subprocess.run([sys.executable, str(DEPLOY / "check.py"), "--deploy-dir", str(target)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    assert re.search(r"attest-planner container planner: ATTEST_DATABASE_URL is given to the planner", done.stderr), \
        done.stderr
    assert "service 'verifier' (env file attest.env.example): ATTEST_AUTH_TOKEN is given to the verifier" \
        in done.stderr, done.stderr


def test_only_the_roles_that_open_the_audit_store_are_declared_to() -> None:
    """The facts role_environment.py states by hand, checked against the services' wiring."""
    from services.verifier.semantic_guard_settings import SemanticGuardSettings

    for role in ROLES:
        main = REPO_ROOT / ("gateway" if role == "gateway" else f"services/{role}") / "__main__.py"
        opens = "settings.database_url" in main.read_text()
        assert opens == (role in AUDIT_STORE_ROLES), role
        assert (AUDIT_STORE in role_variables(role)) == opens, role
    assert EXTRA_PREFIXES["verifier"] == (SemanticGuardSettings.model_config["env_prefix"],)


def test_a_setting_is_withheld_however_it_is_spelt() -> None:
    """pydantic-settings matches names case-insensitively, so the filter does too."""
    given = {"attest_database_url": "sqlite:///x", "Attest_Auth_Token": "t", "PATH": "/bin",
             "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "ATTEST_PLANNER_PORT": "0"}
    assert environment_for("planner", given) == {"PATH": "/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                                                 "ATTEST_PLANNER_PORT": "0"}
    assert environment_for("gateway", given).keys() == {"attest_database_url", "Attest_Auth_Token", "PATH",
                                                        "OTEL_EXPORTER_OTLP_ENDPOINT"}


# --- the gateway checks which role's certificate it reached -----------------------------------


class _RecordingPlanner(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    def CreatePlan(self, request, context):  # noqa: N802 (the generated name)
        self.calls += 1
        return planner_pb2.CreatePlanResponse()


def _serve_as(pki: dict, identity: str) -> tuple[grpc.Server, int, _RecordingPlanner]:
    """A planner server presenting `identity`'s certificate, admitting clients of the same CA."""
    files = pki[identity]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    planner = _RecordingPlanner()
    planner_pb2_grpc.add_PlannerServiceServicer_to_server(planner, server)
    credentials = grpc.ssl_server_credentials(
        [(files.key_file.read_bytes(), files.cert_file.read_bytes())],
        root_certificates=files.ca_file.read_bytes(), require_client_auth=True)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, port, planner


@pytest.mark.parametrize("impostor", ["executor", "gatekeeper", "intruder"])
def test_the_gateway_refuses_another_identity_on_the_planners_address(tmp_path: Path, impostor: str) -> None:
    pki = write_throwaway_pki(tmp_path, [*ROLES, "intruder"])
    results: dict[str, tuple[grpc.StatusCode | None, int]] = {}
    for identity in ("planner", impostor):
        server, port, planner = _serve_as(pki, identity)
        pool = ChannelPool(credentials=files_channel_credentials(pki["gateway"]))
        address = f"127.0.0.1:{port}"
        clients = DownstreamClients(pool, planner=address, executor=address, gatekeeper=address,
                                    verifier=address, composer=address)
        try:
            clients.planner.CreatePlan(planner_pb2.CreatePlanRequest(), timeout=5)
            results[identity] = (None, planner.calls)
        except grpc.RpcError as error:
            results[identity] = (error.code(), planner.calls)
        finally:
            pool.close()
            server.stop(None)
    assert results["planner"] == (None, 1), results
    # Refused at the handshake: the impostor never sees the call.
    assert results[impostor] == (grpc.StatusCode.UNAVAILABLE, 0), results


class _CountingInterceptor(grpc.ServerInterceptor):
    def __init__(self) -> None:
        self.calls = 0

    def intercept_service(self, continuation, handler_call_details):
        self.calls += 1
        return continuation(handler_call_details)


def _health_server(pki: dict, identity: str) -> tuple[grpc.Server, int, _CountingInterceptor]:
    """A health service, SERVING, presenting `identity`'s certificate; counts the calls it gets."""
    files = pki[identity]
    counter = _CountingInterceptor()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[counter])
    health = HealthServicer()
    health.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    credentials = grpc.ssl_server_credentials(
        [(files.key_file.read_bytes(), files.cert_file.read_bytes())],
        root_certificates=files.ca_file.read_bytes(), require_client_auth=True)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, port, counter


@pytest.mark.integration
def test_a_gateway_process_never_calls_an_impostor_on_a_roles_address(tmp_path: Path) -> None:
    """A real gateway whose planner address is served with the executor's certificate: its
    readiness checks reach the four honest roles and never the impostor."""
    pki = write_throwaway_pki(tmp_path / "tls", [*ROLES, "intruder"])
    servers = {role: _health_server(pki, "executor" if role == "planner" else role)
               for role in ROLES if role != "gateway"}
    database = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(database)
    files = pki["gateway"]
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("ATTEST_")}
    env |= {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")]),
            "ATTEST_GATEWAY_PORT": "0", "ATTEST_DATABASE_URL": database, "ATTEST_AUTH_TOKEN": "t",
            "ATTEST_TLS_CA_FILE": str(files.ca_file), "ATTEST_TLS_CERT_FILE": str(files.cert_file),
            "ATTEST_TLS_KEY_FILE": str(files.key_file), "ATTEST_READINESS_INTERVAL_SECONDS": "0.2",
            **{f"ATTEST_{role.upper()}_ADDR": f"127.0.0.1:{port}" for role, (_, port, _) in servers.items()}}
    gateway = subprocess.Popen([sys.executable, "-m", "gateway"], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        assert gateway.stdout is not None
        assert gateway.stdout.readline().startswith("READY gateway"), "the gateway did not start"
        honest = [role for role in servers if role != "planner"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(servers[role][2].calls >= 2 for role in honest):
            time.sleep(0.1)
        assert {role: servers[role][2].calls >= 2 for role in honest} == dict.fromkeys(honest, True)
        assert servers["planner"][2].calls == 0
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        for server, _, _ in servers.values():
            server.stop(None)


# --- the audit store's file mode ---------------------------------------------------------------


def _modes(database: Path) -> dict[str, int]:
    return {database.name + suffix: stat.S_IMODE(os.stat(f"{database}{suffix}").st_mode)
            for suffix in SQLITE_FILES if Path(f"{database}{suffix}").exists()}


def test_a_migrated_sqlite_audit_store_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "var" / "attest.db"
    done = subprocess.run([sys.executable, "-m", "shared.db.migrate", "--url", f"sqlite:///{database}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.umask(0o022))
    assert done.returncode == 0, done.stderr
    modes = _modes(database)
    assert modes and set(modes.values()) == {0o600}, {name: oct(mode) for name, mode in modes.items()}


def test_an_existing_store_loses_group_and_other_bits_and_gains_none(tmp_path: Path) -> None:
    shared_file, read_only = tmp_path / "shared.db", tmp_path / "read-only.db"
    for path, mode in ((shared_file, 0o664), (read_only, 0o444)):
        sqlite3.connect(path).close()  # a store some earlier version created
        path.chmod(mode)
        Path(f"{path}-wal").write_bytes(b"")
        Path(f"{path}-wal").chmod(mode)
        make_engine(f"sqlite:///{path}").dispose()
    assert _modes(shared_file) == {"shared.db": 0o600, "shared.db-wal": 0o600}
    assert _modes(read_only) == {"read-only.db": 0o400, "read-only.db-wal": 0o400}


@pytest.mark.integration
def test_the_audit_store_stays_owner_only_after_a_run(secure_cluster) -> None:
    with grpc.insecure_channel(secure_cluster.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query="checkout-api 现在正常吗？"), metadata=token("alice"), timeout=120)
    assert response.run_id
    database = Path(secure_cluster.database_url.removeprefix("sqlite:///"))
    modes = _modes(database)
    assert f"{database.name}-wal" in modes, modes  # the run was written through the WAL
    assert set(modes.values()) == {0o600}, {name: oct(mode) for name, mode in modes.items()}
