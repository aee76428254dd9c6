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
