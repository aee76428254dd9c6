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
