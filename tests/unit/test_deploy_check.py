"""`deploy/check.py` (make deploy-check): the real deploy/ passes; deliberately broken copies fail
with one precise line per problem."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHECK = DEPLOY / "check.py"


def run_check(deploy_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "--deploy-dir", str(deploy_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def deploy_copy(tmp_path: Path) -> Path:
    target = tmp_path / "deploy"
    shutil.copytree(DEPLOY, target, ignore=shutil.ignore_patterns("attest.env", "__pycache__"))
    return target


def edit_docs(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    docs = list(yaml.safe_load_all(path.read_text()))
    edit(docs)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def by_kind(docs: list[dict], kind: str) -> dict:
    return next(d for d in docs if d["kind"] == kind)


def test_the_real_manifests_pass() -> None:
    done = run_check(DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deploy-check: OK" in done.stdout
    assert "resources validated against Kubernetes" in done.stdout


def test_a_broken_copy_fails_with_one_line_per_problem(deploy_copy: Path) -> None:
    base = deploy_copy / "k8s" / "base"

    def no_probes(docs: list[dict]) -> None:
        container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        del container["readinessProbe"], container["livenessProbe"]

    def wrong_type(docs: list[dict]) -> None:
        by_kind(docs, "Deployment")["spec"]["replicas"] = "two"

    def hpa_to_nowhere(docs: list[dict]) -> None:
        by_kind(docs, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] = "attest-nope"

    edit_docs(base / "planner.yaml", no_probes)
    edit_docs(base / "verifier.yaml", wrong_type)
    edit_docs(base / "composer.yaml", hpa_to_nowhere)
    edit_docs(base / "kustomization.yaml", lambda d: d[0]["resources"].append("missing.yaml"))

    done = run_check(deploy_copy)
    assert done.returncode == 1, done.stdout
    lines = done.stderr.splitlines()
    text = done.stderr

    def has(*parts: str) -> bool:
        return any(all(part in line for part in parts) for line in lines)

    assert has("Deployment/attest-planner container planner", "no readinessProbe"), text
    assert has("Deployment/attest-planner container planner", "no livenessProbe"), text
    assert has("verifier.yaml Deployment/attest-verifier", "schema: spec.replicas", "integer"), text
    assert has("base/kustomization.yaml", "resource 'missing.yaml' does not exist"), text
    assert has("HorizontalPodAutoscaler/attest-composer", "attest-nope is not a Deployment"), text
    assert has("Deployment/attest-composer", "no HorizontalPodAutoscaler targets it"), text
    # The broken base breaks the overlay built on it too; every problem is reported, not just one.
    assert has("k8s/overlays/production]", "no readinessProbe"), text
    assert len(lines) == len(set(lines))
    assert lines[-1].startswith("deploy-check: ") and "problem(s)" in lines[-1]


def test_unknown_fields_cycles_and_security_are_caught(deploy_copy: Path) -> None:
    base = deploy_copy / "k8s" / "base"

    def insecure(docs: list[dict]) -> None:
        container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        container["securityContext"]["readOnlyRootFilesystem"] = False
        container["readinessProbe"] = {"grpc": {"port": 9999}}
        container["resourcez"] = {}  # strict schema: unknown field

    edit_docs(base / "gatekeeper.yaml", insecure)
    component = deploy_copy / "k8s" / "components" / "observability" / "kustomization.yaml"
    edit_docs(component, lambda d: d[0].setdefault("components", []).append("."))

    done = run_check(deploy_copy)
    assert done.returncode == 1
    text = done.stderr
    assert "readOnlyRootFilesystem is not true" in text
    assert "readinessProbe port 9999 is not a containerPort" in text
    assert "resourcez" in text
    assert "kustomization cycle" in text


def test_compose_problems(deploy_copy: Path) -> None:
    compose = deploy_copy / "compose" / "docker-compose.yml"
    spec = yaml.safe_load(compose.read_text())
    spec["services"]["planner"]["ports"] = ["50051:50051"]
    spec["services"]["planner"]["depends_on"] = {"nosuch": {"condition": "service_started"}}
    compose.write_text(yaml.safe_dump(spec, sort_keys=False))
    (deploy_copy / "compose" / "attest.env.example").unlink()

    done = run_check(deploy_copy)
    assert done.returncode == 1
    text = done.stderr
    assert "service 'planner' publishes ports; only the gateway may" in text
    assert "service 'planner' depends on unknown service 'nosuch'" in text
    assert "service 'planner' does not depend on migrate" in text
    assert "env file 'attest.env' (or attest.env.example) missing" in text


def test_unparseable_and_unreferenced_yaml(deploy_copy: Path) -> None:
    (deploy_copy / "k8s" / "base" / "stray.yaml").write_text("apiVersion: v1\nkind: [oops\n")
    done = run_check(deploy_copy)
    assert done.returncode == 1
    assert "base/stray.yaml: cannot parse YAML" in done.stderr
    assert "base/stray.yaml: not referenced by any kustomization" in done.stderr


def _has_line(text: str, *parts: str) -> bool:
    return any(all(part in line for part in parts) for line in text.splitlines())


def test_missing_certificates_network_policies_and_health_port_probes_fail(deploy_copy: Path) -> None:
    base = deploy_copy / "k8s" / "base"
    kustomization = base / "kustomization.yaml"
    edit_docs(kustomization, lambda d: d[0]["resources"].remove("network-policy.yaml"))
    (base / "network-policy.yaml").unlink()

    def plaintext_executor(docs: list[dict]) -> None:
        container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        container["env"].append({"name": "ATTEST_INSECURE", "value": "1"})
        container["readinessProbe"]["grpc"]["port"] = 50052

    def wrong_identity(docs: list[dict]) -> None:
        for doc in docs:
            if doc["kind"] == "Certificate" and doc["metadata"]["name"] == "attest-planner-tls":
                doc["spec"]["uris"] = ["spiffe://attest/gateway"]
                doc["spec"]["usages"] = ["server auth"]
            if doc["kind"] == "Certificate" and doc["metadata"]["name"] == "attest-verifier-tls":
                doc["spec"]["privateKey"]["algoritm"] = "ECDSA"  # a typo the strict schema catches
        docs[:] = [d for d in docs if d["metadata"]["name"] != "attest-composer-tls"]

    edit_docs(base / "executor.yaml", plaintext_executor)
    edit_docs(base / "tls.yaml", wrong_identity)

    done = run_check(deploy_copy)
    assert done.returncode == 1
    text = done.stderr
    for role in ("gateway", "planner", "executor", "gatekeeper", "verifier", "composer"):
        assert _has_line(text, f"Deployment/attest-{role}", "no NetworkPolicy restricts who reaches its pods"), text
    assert _has_line(text, "Deployment/attest-executor container executor", "ATTEST_INSECURE is set"), text
    assert _has_line(text, "container executor", "readinessProbe must use the health port 8081, not 50052"), text
    assert _has_line(text, "Certificate/attest-planner-tls", "uris must contain spiffe://attest/planner"), text
    assert _has_line(text, "Certificate/attest-planner-tls", "usages must include 'client auth'"), text
    assert _has_line(text, "Certificate/attest-verifier-tls", "schema: spec.privateKey", "algoritm"), text
    assert _has_line(text, "container composer", "Secret attest-composer-tls is issued by no cert-manager Certificate"), text


def test_network_policies_that_admit_too_much_fail(deploy_copy: Path) -> None:
    policy_file = deploy_copy / "k8s" / "base" / "network-policy.yaml"

    def widen(docs: list[dict]) -> None:
        roles = next(d for d in docs if d["metadata"]["name"] == "attest-roles-from-gateway")
        roles["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"].pop("app.kubernetes.io/component")
        gateway = next(d for d in docs if d["metadata"]["name"] == "attest-gateway-from-frontends")
        gateway["spec"]["ingress"].append({"ports": [{"protocol": "TCP", "port": 50050}]})

    edit_docs(policy_file, widen)
    done = run_check(deploy_copy)
    assert done.returncode == 1
    text = done.stderr
    assert _has_line(text, "Deployment/attest-executor", "attest-roles-from-gateway admits more than the gateway's pods"), text
    assert _has_line(text, "Deployment/attest-gateway", "attest-gateway-from-frontends admits every source"), text


def test_compose_services_need_their_certificates_and_health_port(deploy_copy: Path) -> None:
    compose = deploy_copy / "compose" / "docker-compose.yml"
    spec = yaml.safe_load(compose.read_text())
    del spec["services"]["verifier"]["environment"]["ATTEST_TLS_KEY_FILE"]
    spec["services"]["planner"]["environment"]["ATTEST_INSECURE"] = "1"
    del spec["services"]["certs"]
    compose.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_check(deploy_copy)
    assert done.returncode == 1
    text = done.stderr
    assert "service 'verifier': ATTEST_TLS_KEY_FILE not set (mutual TLS, health port)" in text
    assert "service 'planner' sets ATTEST_INSECURE" in text
    assert "service 'certs' is missing" in text


# --- headless role Services, dns:/// addresses, keepalive and connection age --------------------


def failing_check(deploy_dir: Path) -> str:
    """deploy/check.py's report on a copy that must fail."""
    done = run_check(deploy_dir)
    assert done.returncode == 1, done.stdout
    return done.stderr


def _gateway_env(docs: list[dict]) -> dict[str, dict]:
    container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item for item in container["env"]}


def test_role_services_must_be_headless_and_dialled_by_their_dns_names(deploy_copy: Path) -> None:
    base = deploy_copy / "k8s" / "base"

    def clusterip(docs: list[dict]) -> None:
        del by_kind(docs, "Service")["spec"]["clusterIP"]

    def translated_port(docs: list[dict]) -> None:
        by_kind(docs, "Service")["spec"]["ports"][0]["targetPort"] = 50061

    def wrong_addresses(docs: list[dict]) -> None:
        env = _gateway_env(docs)
        env["ATTEST_VERIFIER_ADDR"]["value"] = "attest-verifier:50054"
        env["ATTEST_COMPOSER_ADDR"]["value"] = "dns:///attest-composer.attest.svc.cluster.local:50059"
        env["ATTEST_GATEKEEPER_ADDR"]["value"] = "dns:///attest-gateway.attest.svc.cluster.local:50053"

    def planner_cert_without_fqdn(docs: list[dict]) -> None:
        for doc in docs:
            if doc["metadata"]["name"] == "attest-planner-tls":
                doc["spec"]["dnsNames"].remove("attest-planner.attest.svc.cluster.local")

    edit_docs(base / "executor.yaml", clusterip)
    edit_docs(base / "planner.yaml", translated_port)
    edit_docs(base / "gateway.yaml", wrong_addresses)
    edit_docs(base / "tls.yaml", planner_cert_without_fqdn)

    text = failing_check(deploy_copy)
    for build in ("k8s/base]", "k8s/overlays/production]"):
        assert _has_line(text, build, "base/executor.yaml Service/attest-executor",
                         "must be headless (clusterIP: None)"), text
        assert _has_line(text, build, "base/planner.yaml Service/attest-planner",
                         "port 50051 goes to container port 50061"), text
        assert _has_line(text, build, "base/gateway.yaml Deployment/attest-gateway container gateway",
                         "ATTEST_VERIFIER_ADDR='attest-verifier:50054' is not a dns:///<host>:<port> target"), text
        assert _has_line(text, build, "container gateway", "ATTEST_COMPOSER_ADDR dials port 50059",
                         "not a port of Service/attest-composer [50055]"), text
        assert _has_line(text, build, "container gateway",
                         "ATTEST_GATEKEEPER_ADDR dials attest-gateway.attest.svc.cluster.local, not the "
                         "gatekeeper's Service: expected one of ['attest-gatekeeper.attest.svc.cluster.local']"), text
        assert _has_line(text, build, "base/tls.yaml Certificate/attest-planner-tls",
                         "dnsNames must contain attest-planner.attest.svc.cluster.local"), text
    # The headless executor is still dialled correctly: nothing else is said about it.
    assert not _has_line(text, "ATTEST_EXECUTOR_ADDR"), text


def test_an_overlay_in_another_namespace_needs_addresses_in_that_namespace(deploy_copy: Path) -> None:
    overlay = deploy_copy / "k8s" / "overlays" / "production" / "kustomization.yaml"
    edit_docs(overlay, lambda d: d[0].update(namespace="attest-prod"))

    text = failing_check(deploy_copy)
    assert _has_line(text, "k8s/overlays/production]", "container gateway",
                     "ATTEST_PLANNER_ADDR dials attest-planner.attest.svc.cluster.local",
                     "'attest-planner.attest-prod.svc.cluster.local'"), text
    assert not _has_line(text, "k8s/base]"), text


def test_keepalive_connection_age_and_termination_grace_must_fit_the_deadline(deploy_copy: Path) -> None:
    base = deploy_copy / "k8s" / "base"

    def config(docs: list[dict]) -> None:
        data = by_kind(docs, "ConfigMap")["data"]
        gateway_only = next(d for d in docs if d["metadata"]["name"] == "attest-gateway-config")["data"]
        gateway_only["ATTEST_DIAGNOSIS_TIMEOUT_SECONDS"] = "90"  # longer than both graces (70)
        data["ATTEST_GRPC_KEEPALIVE_TIMEOUT_SECONDS"] = "20"  # = the keepalive interval
        del data["ATTEST_GRPC_KEEPALIVE_SECONDS"]

    def keepalive_and_negative_age(docs: list[dict]) -> None:
        container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        container["env"] += [{"name": "ATTEST_GRPC_KEEPALIVE_SECONDS", "value": "20"},
                             {"name": "ATTEST_GRPC_MAX_CONNECTION_AGE_SECONDS", "value": "-5"}]

    def short_termination(docs: list[dict]) -> None:
        container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        container["env"].append({"name": "ATTEST_GRPC_KEEPALIVE_SECONDS", "value": "20"})
        by_kind(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30

    edit_docs(base / "config.yaml", config)
    edit_docs(base / "verifier.yaml", keepalive_and_negative_age)
    edit_docs(base / "planner.yaml", short_termination)

    text = failing_check(deploy_copy)
    lines = [line for line in text.splitlines() if "k8s/base]" in line]
    config_map = "base/config.yaml ConfigMap/attest-config"
    deadline = "is shorter than the gateway's diagnosis deadline ATTEST_DIAGNOSIS_TIMEOUT_SECONDS 90"
    # A value set once in the ConfigMap is reported once, where it is set.
    assert sum(config_map in line and "ATTEST_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS 70 " + deadline in line
               for line in lines) == 1, text
    assert _has_line(text, "k8s/base]", config_map, "ATTEST_SHUTDOWN_GRACE_SECONDS 70 " + deadline), text
    assert _has_line(text, "k8s/base]", config_map, "ATTEST_GRPC_KEEPALIVE_TIMEOUT_SECONDS 20 must be "
                     "shorter than ATTEST_GRPC_KEEPALIVE_SECONDS 20"), text
    assert _has_line(text, "k8s/base]", "Deployment/attest-composer container composer",
                     "ATTEST_GRPC_KEEPALIVE_SECONDS is not set"), text
    assert _has_line(text, "k8s/base]", "base/verifier.yaml Deployment/attest-verifier container verifier",
                     "ATTEST_GRPC_MAX_CONNECTION_AGE_SECONDS='-5' is not a positive number"), text
    assert _has_line(text, "k8s/base]", "base/planner.yaml Deployment/attest-planner:",
                     "terminationGracePeriodSeconds 30 must exceed the 70 s its calls in flight get"), text
    assert not _has_line(text, "terminationGracePeriodSeconds 80"), text


def test_compose_dials_every_replica_of_scalable_roles(deploy_copy: Path) -> None:
    compose = deploy_copy / "compose" / "docker-compose.yml"
    spec = yaml.safe_load(compose.read_text())
    services = spec["services"]
    gateway = services["gateway"]["environment"]
    gateway["ATTEST_PLANNER_ADDR"] = "planner:50051"
    gateway["ATTEST_EXECUTOR_ADDR"] = "dns:///nosuch:50052"
    gateway["ATTEST_GATEKEEPER_ADDR"] = "dns:///planner:50051"
    gateway["ATTEST_VERIFIER_ADDR"] = "dns:///verifier:50099"
    services["executor"]["container_name"] = "attest-executor"
    services["executor"]["stop_grace_period"] = "30s"
    services["composer"]["environment"] = {**services["composer"]["environment"],
                                           "ATTEST_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS": "30"}
    compose.write_text(yaml.safe_dump(spec, sort_keys=False))

    text = failing_check(deploy_copy)
    where = "compose/docker-compose.yml: service"
    assert f"{where} 'gateway': ATTEST_PLANNER_ADDR='planner:50051' is not a dns:///<host>:<port> target" in text
    assert f"{where} 'gateway': ATTEST_EXECUTOR_ADDR dials 'nosuch', not a compose service" in text
    assert f"{where} 'gateway': ATTEST_GATEKEEPER_ADDR dials 'planner', not the service 'gatekeeper'" in text
    assert f"{where} 'gateway': ATTEST_VERIFIER_ADDR dials port 50099, not the verifier's ATTEST_VERIFIER_PORT" in text
    assert f"{where} 'executor' sets container_name: it cannot be scaled" in text
    assert f"{where} 'executor': stop_grace_period 30s must exceed the 70 s its calls in flight get" in text
    assert (f"{where} 'composer': ATTEST_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS 30 is shorter than the "
            "gateway's diagnosis deadline ATTEST_DIAGNOSIS_TIMEOUT_SECONDS 60") in text
    assert not _has_line(text, "ATTEST_COMPOSER_ADDR"), text



def test_the_shipped_settings_are_real_settings_and_the_tokens_placeholder_loads(tmp_path: Path, monkeypatch) -> None:
    """Every ATTEST_ value of the shared ConfigMap is read by some service's settings and valid
    there (a misspelt limit would be ignored silently), and the gateway's tokens-file Secret, as
    shipped, is a file the gateway starts with."""
    from shared.config import ExecutorSettings, GatewaySettings, ModelSettings, PlannerSettings
    from shared.principals import PrincipalTokens

    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "base" / "config.yaml").read_text()))
    data = next(d for d in docs if d and d.get("kind") == "ConfigMap")["data"]
    names = {f"ATTEST_{field.upper()}" for cls in (GatewaySettings, ExecutorSettings, PlannerSettings)
             for field in cls.model_fields} | {f"ATTEST_MODEL_{field.upper()}" for field in ModelSettings.model_fields}
    shipped = {name: str(value) for name, value in data.items() if name.startswith("ATTEST_")}
    assert shipped.keys() <= names, sorted(shipped.keys() - names)
    for name, value in shipped.items():
        monkeypatch.setenv(name, value)
    for cls in (GatewaySettings, ExecutorSettings, PlannerSettings, ModelSettings):
        settings = cls()  # every shipped value validates where it is read
        for name, value in shipped.items():
            field = name.removeprefix("ATTEST_MODEL_" if cls is ModelSettings else "ATTEST_").lower()
            if name.startswith("ATTEST_MAX_") and field in cls.model_fields:
                assert float(getattr(settings, field)) == float(value), name
    secrets = list(yaml.safe_load_all((DEPLOY / "k8s" / "base" / "secret.yaml").read_text()))
    tokens = next(d for d in secrets if d["metadata"]["name"] == "attest-auth-tokens")["stringData"]["tokens"]
    (tmp_path / "tokens").write_text(tokens)
    assert PrincipalTokens.from_file(tmp_path / "tokens").principals == ("replace-me",)
