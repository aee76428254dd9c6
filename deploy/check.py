"""`make deploy-check`: validate deploy/ without a cluster or a Docker engine.

1. Every YAML file under deploy/ parses.
2. Every kustomization under deploy/k8s is built in Python (the subset we use: resources,
   components, patches with a `path` (strategic merge of maps), namespace, labels/commonLabels,
   images): referenced files must exist, no cycles, and every manifest must be reached by some
   kustomization.
3. Every built resource is validated against the Kubernetes JSON schemas (strict: unknown fields
   are errors) shipped inside the `kubernetes-validate` package — offline.
   cert-manager's Certificate and Issuer (no schema ships offline) are checked against the
   subset of their CRDs written below (CERT_MANAGER_SCHEMAS), strictly as well.
4. Project rules: each Deployment's containers have resources, runAsNonRoot, a read-only root
   filesystem, dropped capabilities and readiness + liveness probes (gRPC on the container port
   for Attest's services); each Deployment has a Service selecting its pods; each Attest
   Deployment has an HPA; every HPA targets an existing Deployment; one Attest image.
   Mutual TLS: each of the six services sets ATTEST_TLS_CA/CERT/KEY_FILE inside a
   mounted Secret that a cert-manager Certificate issues (identity URI spiffe://attest/<role>, its
   Service name as DNS SAN, server and client auth, an Issuer of this build); nothing sets
   ATTEST_INSECURE. Probes go to the plaintext health port (ATTEST_HEALTH_PORT), liveness asks for
   the "liveness" service. NetworkPolicies: the roles admit only the gateway's pods, the gateway
   only pods labelled attest.io/frontend: "true".
   Scale-out, in every build: each role's Service is headless (clusterIP: None) and
   sends its port to the same container port; the gateway's ATTEST_<ROLE>_ADDR is
   dns:///<service>.<namespace>.svc.cluster.local:<port> of that Service as built (namespace
   included), and the role's Certificate has that host in its dnsNames. Every Attest container
   sets ATTEST_GRPC_KEEPALIVE_SECONDS, _KEEPALIVE_TIMEOUT_SECONDS (shorter),
   _MAX_CONNECTION_AGE_SECONDS, _MAX_CONNECTION_AGE_GRACE_SECONDS and ATTEST_SHUTDOWN_GRACE_SECONDS,
   positive, both graces at least the gateway's ATTEST_DIAGNOSIS_TIMEOUT_SECONDS;
   terminationGracePeriodSeconds exceeds both graces. A problem names where the value is set.
   Least privilege: each Attest container gets only the ATTEST_ settings its role reads
   (shared/role_environment.py), whether from a ConfigMap, a Secret or its own `env`; it mounts
   only its own role's certificate Secret, and each role's Certificate carries the role's TLS name
   (the DNS SAN the gateway requires of it) and no other role's.
5. deploy/compose/docker-compose.yml: services, depends_on, env files, every service's
   certificates and health port; the gateway dials each role as dns:///<role>:<its port>, the
   roles have no container_name, the same keepalive and grace settings as in Kubernetes, and a
   stop_grace_period longer than the graces; least privilege as in Kubernetes (each role's
   `environment` and env files name only what the role reads, secrets are `${...}` from
   attest.env, each role mounts a certificate volume no other role mounts); `docker compose
   config -q` when that command works here.

Exit 0 with a summary; otherwise one line per problem and exit 1.
Usage: python deploy/check.py [--deploy-dir DIR] [--kubernetes-version X.Y]
"""

from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

from shared.role_environment import foreign_variables
from shared.transport_security import role_tls_name

KUBERNETES_VERSION = "1.30"
ATTEST_ROLES = ("gateway", "planner", "executor", "gatekeeper", "verifier", "composer")
ATTEST_NAME_LABEL = ("app.kubernetes.io/name", "attest")
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "ClusterIssuer"}
ROLE_CALLERS = {"gateway"}  # who may reach the five roles (ATTEST_ALLOWED_CALLERS' default)
FRONTEND_LABEL = ("attest.io/frontend", "true")
LIVENESS_SERVICE = "liveness"
TLS_ENV = ("ATTEST_TLS_CA_FILE", "ATTEST_TLS_CERT_FILE", "ATTEST_TLS_KEY_FILE")
IDENTITY_PREFIX = "spiffe://attest/"
CERT_MANAGER_API = "cert-manager.io/v1"

Resource = dict[str, Any]
Env = dict[str, tuple[str, str]]  # variable -> (value, where it is set)


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def problem(self, where: object, message: str) -> None:
        line = f"{where}: {message}"
        if line not in self.problems:  # a base built by several overlays reports once
            self.problems.append(line)


def rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve().parent))
    except ValueError:
        return str(path)


def load_docs(path: Path, report: Report, root: Path) -> list[Any]:
    """The non-empty YAML documents of `path`; a parse error is a problem and yields nothing."""
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    except (OSError, yaml.YAMLError) as exc:
        report.problem(rel(path, root), f"cannot parse YAML: {str(exc).splitlines()[0]}")
        return []


def ident(resource: Resource) -> str:
    meta = resource.get("metadata") or {}
    return f"{resource.get('kind')}/{meta.get('name') if isinstance(meta, dict) else None}"


# --- a mini kustomize build ---------------------------------------------------------------------


def kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


def merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge restricted to maps (lists are replaced), which is what our patches use."""
    if isinstance(target, dict) and isinstance(patch, dict):
        merged = dict(target)
        for key, value in patch.items():
            merged[key] = merge_patch(target.get(key), value) if key in target else value
        return merged
    return copy.deepcopy(patch)


def set_labels(resource: Resource, labels: dict[str, str], include_selectors: bool) -> None:
    resource.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    spec = resource.get("spec")
    if not isinstance(spec, dict):
        return
    template = spec.get("template")
    if isinstance(template, dict):  # kustomize labels pod templates too
        template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    if include_selectors:
        if isinstance(spec.get("selector"), dict):
            if resource.get("kind") == "Service":
                spec["selector"].update(labels)
            else:
                spec["selector"].setdefault("matchLabels", {}).update(labels)


def pod_spec(resource: Resource) -> dict[str, Any]:
    spec = resource.get("spec") or {}
    if resource.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return ((spec.get("template") or {}).get("spec")) or {}


def set_images(resource: Resource, images: list[dict[str, Any]]) -> None:
    pod = pod_spec(resource)
    for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        image = str(container.get("image", ""))
        name, _, tag = image.partition(":")
        for rule in images:
            if rule.get("name") == name:
                new_tag = str(rule.get("newTag", tag)) if rule.get("newTag") is not None else tag
                new_name = rule.get("newName", name)
                container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name
                if rule.get("digest"):
                    container["image"] = f"{new_name}@{rule['digest']}"


def build(
    directory: Path,
    root: Path,
    report: Report,
    stack: tuple[Path, ...] = (),
    inherited: list[tuple[Resource, Path]] | None = None,
    used_files: set[Path] | None = None,
    standalone: bool = False,
) -> list[tuple[Resource, Path]]:
    """The resources a kustomization (or, with `inherited`, a Component) produces, each paired
    with the file it came from."""
    used = used_files if used_files is not None else set()
    directory = directory.resolve()
    where = rel(directory, root)
    if directory in stack:
        cycle = " -> ".join(rel(d, root) for d in (*stack, directory))
        report.problem(where, f"kustomization cycle: {cycle}")
        return []
    kfile = kustomization_file(directory)
    if kfile is None:
        report.problem(where, "no kustomization.yaml in this directory")
        return []
    used.add(kfile.resolve())
    docs = load_docs(kfile, report, root)
    spec = docs[0] if docs and isinstance(docs[0], dict) else {}
    kwhere = rel(kfile, root)
    kind = spec.get("kind", "Kustomization")
    is_component = kind == "Component"
    if is_component and inherited is None:
        report.problem(kwhere, "a Component must be listed under `components`, not `resources`")
    if not is_component and inherited is not None:
        report.problem(kwhere, f"listed under `components` but its kind is {kind}")
    known = {"apiVersion", "kind", "resources", "components", "patches", "namespace",
             "labels", "commonLabels", "images", "metadata"}
    for key in sorted(set(spec) - known):
        report.problem(kwhere, f"`{key}` is not supported by deploy/check.py's kustomize build")

    out: list[tuple[Resource, Path]] = list(inherited or [])
    for entry in spec.get("resources") or []:
        target = (directory / str(entry)).resolve()
        if target.is_dir():
            out.extend(build(target, root, report, (*stack, directory), None, used))
        elif target.is_file():
            used.add(target)
            for doc in load_docs(target, report, root):
                if isinstance(doc, dict):
                    out.append((doc, target))
                else:
                    report.problem(rel(target, root), "a YAML document is not a mapping")
        else:
            report.problem(kwhere, f"resource {entry!r} does not exist")
    for entry in spec.get("components") or []:
        target = (directory / str(entry)).resolve()
        if not target.is_dir():
            report.problem(kwhere, f"component {entry!r} does not exist")
            continue
        out = build(target, root, report, (*stack, directory), out, used)

    for patch_entry in spec.get("patches") or []:
        path = patch_entry.get("path") if isinstance(patch_entry, dict) else None
        if not path:
            report.problem(kwhere, "only `patches: - path: FILE` is supported")
            continue
        patch_file = (directory / path).resolve()
        if not patch_file.is_file():
            report.problem(kwhere, f"patch {path!r} does not exist")
            continue
        used.add(patch_file)
        for patch in load_docs(patch_file, report, root):
            matches = [i for i, (res, _) in enumerate(out) if ident(res) == ident(patch)]
            if not matches and not standalone:
                report.problem(rel(patch_file, root), f"patch target {ident(patch)} not found")
            for i in matches:
                out[i] = (merge_patch(out[i][0], patch), out[i][1])

    out = [(copy.deepcopy(res), src) for res, src in out]
    labels: list[tuple[dict[str, str], bool]] = []
    if spec.get("commonLabels"):
        labels.append((spec["commonLabels"], True))
    for entry in spec.get("labels") or []:
        labels.append((entry.get("pairs") or {}, bool(entry.get("includeSelectors"))))
    for res, _ in out:
        if spec.get("namespace") and res.get("kind") not in CLUSTER_SCOPED:
            res.setdefault("metadata", {})["namespace"] = spec["namespace"]
        for pairs, include_selectors in labels:
            set_labels(res, {str(k): str(v) for k, v in pairs.items()}, include_selectors)
        if spec.get("images"):
            set_images(res, spec["images"])
    return out


# --- checks on built resources --------------------------------------------------------------


# --- cert-manager: the subset of its v1 CRDs that Attest's manifests use, checked strictly --------

_STRINGS = {"type": "array", "items": {"type": "string"}}
_ISSUER_REF = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "kind": {"type": "string"}, "group": {"type": "string"}},
}
_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
    "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
]
_METADATA = {"type": "object"}
CERTIFICATE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": CERT_MANAGER_API}, "kind": {"const": "Certificate"}, "metadata": _METADATA,
        "spec": {
            "type": "object", "required": ["issuerRef", "secretName"], "additionalProperties": False,
            "properties": {
                "commonName": {"type": "string"}, "dnsNames": _STRINGS, "uris": _STRINGS,
                "ipAddresses": _STRINGS, "emailAddresses": _STRINGS, "isCA": {"type": "boolean"},
                "duration": {"type": "string"}, "renewBefore": {"type": "string"},
                "secretName": {"type": "string"}, "issuerRef": _ISSUER_REF,
                "usages": {"type": "array", "items": {"enum": _USAGES}},
                "privateKey": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "encoding": {"enum": ["PKCS1", "PKCS8"]},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                        "size": {"type": "integer"},
                    },
                },
                "secretTemplate": {"type": "object"}, "subject": {"type": "object"},
                "revisionHistoryLimit": {"type": "integer"},
            },
        },
    },
}
ISSUER_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": CERT_MANAGER_API}, "kind": {"enum": ["Issuer", "ClusterIssuer"]},
        "metadata": _METADATA,
        "spec": {
            "type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
            "properties": {
                "selfSigned": {"type": "object"},
                "ca": {"type": "object", "required": ["secretName"],
                       "properties": {"secretName": {"type": "string"}}},
                "acme": {"type": "object"}, "vault": {"type": "object"}, "venafi": {"type": "object"},
            },
        },
    },
}
CERT_MANAGER_SCHEMAS = {"Certificate": CERTIFICATE_SCHEMA, "Issuer": ISSUER_SCHEMA, "ClusterIssuer": ISSUER_SCHEMA}


def validate_cert_manager(res: Resource, label: str, report: Report) -> None:
    schema = CERT_MANAGER_SCHEMAS[str(res.get("kind"))]
    for error in sorted(jsonschema.Draft7Validator(schema).iter_errors(res), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path) or "(top)"
        report.problem(label, f"schema: {path}: {error.message}")


def validate_schema(resources: list[tuple[Resource, Path]], version: str, where: str,
                    report: Report, root: Path) -> None:
    for res, src in resources:
        label = f"{where} {rel(src, root)} {ident(res)}"
        if not isinstance(res.get("apiVersion"), str) or not isinstance(res.get("kind"), str):
            report.problem(label, "apiVersion and kind are required strings")
            continue
        if str(res["apiVersion"]).startswith("cert-manager.io/") and res["kind"] in CERT_MANAGER_SCHEMAS:
            validate_cert_manager(res, label, report)
            continue
        try:
            kubernetes_validate.validate(res, version, strict=True)
        except ValidationError as exc:
            path = ".".join(str(p) for p in exc.absolute_path) or "(top)"
            report.problem(label, f"schema: {path}: {exc.message}")
        except SchemaNotFoundError as exc:
            report.problem(label, f"schema: {exc.message}")


def is_attest(res: Resource) -> bool:
    labels = ((res.get("metadata") or {}).get("labels")) or {}
    return labels.get(ATTEST_NAME_LABEL[0]) == ATTEST_NAME_LABEL[1]


def selects(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_project(resources: list[tuple[Resource, Path]], where: str, report: Report) -> None:
    by_kind: dict[str, list[Resource]] = {}
    for res, _ in resources:
        by_kind.setdefault(str(res.get("kind")), []).append(res)
    deployments = {(d.get("metadata") or {}).get("name"): d for d in by_kind.get("Deployment", [])}
    services = by_kind.get("Service", [])
    hpas = by_kind.get("HorizontalPodAutoscaler", [])
    attest_images: set[str] = set()

    seen = {}
    for res, _ in resources:
        key = (res.get("kind"), (res.get("metadata") or {}).get("name"))
        if key in seen:
            report.problem(where, f"{ident(res)} is defined twice")
        seen[key] = True

    for name, dep in deployments.items():
        label = f"{where} Deployment/{name}"
        pod = pod_spec(dep)
        pod_labels = (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
            "labels"
        ) or {}
        pod_ctx = pod.get("securityContext") or {}
        mounts_tmp = False
        ports: list[int] = []
        for c in pod.get("containers") or []:
            cname = f"{label} container {c.get('name')}"
            ctx = c.get("securityContext") or {}
            if not (ctx.get("runAsNonRoot") or pod_ctx.get("runAsNonRoot")):
                report.problem(cname, "runAsNonRoot is not true")
            if not ctx.get("readOnlyRootFilesystem"):
                report.problem(cname, "readOnlyRootFilesystem is not true")
            if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
                report.problem(cname, "capabilities.drop does not include ALL")
            resources_ = c.get("resources") or {}
            if not (resources_.get("requests") and resources_.get("limits")):
                report.problem(cname, "resources.requests and resources.limits are required")
            cports = [p.get("containerPort") for p in c.get("ports") or []]
            ports.extend(p for p in cports if isinstance(p, int))
            mounts_tmp |= any(m.get("mountPath") == "/tmp" for m in c.get("volumeMounts") or [])
            for probe in ("readinessProbe", "livenessProbe"):
                spec = c.get(probe)
                if not spec:
                    report.problem(cname, f"no {probe}")
                elif is_attest(dep):
                    grpc_port = (spec.get("grpc") or {}).get("port")
                    if grpc_port is None:
                        report.problem(cname, f"{probe} is not a gRPC probe")
                    elif grpc_port not in cports:
                        report.problem(cname, f"{probe} port {grpc_port} is not a containerPort")
            if is_attest(dep):
                attest_images.add(str(c.get("image")))
        if not mounts_tmp:
            report.problem(label, "no writable volume mounted at /tmp")
        if not any(
            selects((s.get("spec") or {}).get("selector") or {}, pod_labels) for s in services
        ):
            report.problem(label, "no Service selects its pods")
        targets = [
            h
            for h in hpas
            if ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == name
        ]
        if is_attest(dep) and not targets:
            report.problem(label, "no HorizontalPodAutoscaler targets it")

    for hpa in hpas:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") != "Deployment" or ref.get("name") not in deployments:
            report.problem(
                f"{where} {ident(hpa)}",
                f"scaleTargetRef {ref.get('kind')}/{ref.get('name')} is not a Deployment here",
            )

    for svc in services:
        selector = (svc.get("spec") or {}).get("selector") or {}
        pods = [
            (((d.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels")
            or {}
            for d in deployments.values()
        ]
        if not any(selects(selector, labels) for labels in pods):
            report.problem(f"{where} {ident(svc)}", "its selector matches no Deployment's pods")

    roles = {
        ((d.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")
        for d in deployments.values()
        if is_attest(d)
    }
    for role in ATTEST_ROLES:
        if role not in roles:
            report.problem(where, f"no Deployment for the {role}")
    for job in by_kind.get("Job", []):
        if is_attest(job):
            attest_images.update(str(c.get("image")) for c in pod_spec(job).get("containers") or [])
    if not any(is_attest(j) for j in by_kind.get("Job", [])):
        report.problem(where, "no migration Job")
    if len(attest_images) > 1:
        report.problem(where, f"Attest workloads use different images: {sorted(attest_images)}")


# --- mutual TLS, probes on the health port, NetworkPolicies -------------------------------------


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on", "t", "y"}


def container_env_sources(container: dict[str, Any], config_maps: dict[str, tuple[dict[str, Any], str]],
                          label: str) -> Env:
    """The environment a container gets from ConfigMaps of this build (envFrom) and `env` values,
    each with where it is set: the ConfigMap's label, or `label` for the container's own `env`.
    A value from a Secret or field reads as "<from elsewhere>"."""
    env: Env = {}
    for source in container.get("envFrom") or []:
        name = (source.get("configMapRef") or {}).get("name")
        data, where = config_maps.get(str(name)) or ({}, "")
        env.update({str(k): (str(v), where) for k, v in data.items()})
    for item in container.get("env") or []:
        value = str(item["value"]) if "value" in item else "<from elsewhere>"
        env[str(item.get("name"))] = (value, label)
    return env


def container_env(container: dict[str, Any], config_maps: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The environment a container gets (container_env_sources without the sources)."""
    sources = container_env_sources(container, {k: (v, "") for k, v in config_maps.items()}, "")
    return {name: value for name, (value, _) in sources.items()}


def selector_selects(selector: dict[str, Any] | None, labels: dict[str, Any]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions); {} selects all."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and (not present or labels[key] not in values)) or \
           (op == "NotIn" and present and labels[key] in values) or \
           (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def pod_labels(dep: Resource) -> dict[str, Any]:
    return (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def component(res: Resource) -> str | None:
    return ((res.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def _secret_of_path(path: str, container: dict[str, Any], pod: dict[str, Any]) -> str | None:
    """The Secret whose volume is mounted where `path` lies, if any."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        mount_path = str(mount.get("mountPath", "")).rstrip("/")
        if mount_path and path.startswith(mount_path + "/"):
            secret = (volumes.get(mount.get("name")) or {}).get("secret") or {}
            return secret.get("secretName")
    return None


def check_tls_and_probes(resources: list[tuple[Resource, Path]], where: str, report: Report) -> None:
    kinds: dict[str, list[Resource]] = {}
    for res, _ in resources:
        kinds.setdefault(str(res.get("kind")), []).append(res)
    config_maps = {(c.get("metadata") or {}).get("name"): c.get("data") or {} for c in kinds.get("ConfigMap", [])}
    certificates = {((c.get("spec") or {}).get("secretName")): c for c in kinds.get("Certificate", [])}
    issuers = {((i.get("kind")), (i.get("metadata") or {}).get("name")) for i in kinds.get("Issuer", []) + kinds.get("ClusterIssuer", [])}
    services = kinds.get("Service", [])

    for cert in kinds.get("Certificate", []):
        ref = (cert.get("spec") or {}).get("issuerRef") or {}
        if (ref.get("kind", "Issuer"), ref.get("name")) not in issuers:
            report.problem(f"{where} {ident(cert)}", f"issuerRef {ref.get('kind', 'Issuer')}/{ref.get('name')} is not in this build")

    for dep in kinds.get("Deployment", []):
        role = component(dep)
        if not is_attest(dep) or role not in ATTEST_ROLES:
            continue
        pod = pod_spec(dep)
        service_names = [(s.get("metadata") or {}).get("name") for s in services
                         if selects((s.get("spec") or {}).get("selector") or {}, pod_labels(dep))]
        for container in pod.get("containers") or []:
            label = f"{where} {ident(dep)} container {container.get('name')}"
            env = container_env(container, config_maps)
            if _truthy(env.get("ATTEST_INSECURE", "")):
                report.problem(label, "ATTEST_INSECURE is set: the services must talk mutual TLS")
            _check_certificate_files(label, role, env, container, pod, certificates, service_names, report)
            _check_health_probes(label, env, container, report)


def _check_certificate_files(label: str, role: str, env: dict[str, str], container: dict[str, Any],
                             pod: dict[str, Any], certificates: dict[str, Resource],
                             service_names: list[str], report: Report) -> None:
    missing = [name for name in TLS_ENV if not env.get(name)]
    if missing:
        report.problem(label, f"{', '.join(missing)} not set: no certificate for mutual TLS")
        return
    secrets = {_secret_of_path(env[name], container, pod) for name in TLS_ENV}
    if None in secrets or len(secrets) != 1:
        report.problem(label, "ATTEST_TLS_*_FILE must all lie in one mounted Secret volume")
        return
    (secret,) = secrets
    cert = certificates.get(str(secret))
    if cert is None:
        report.problem(label, f"Secret {secret} is issued by no cert-manager Certificate in this build")
        return
    spec = cert.get("spec") or {}
    cert_label = f"{label} Certificate/{(cert.get('metadata') or {}).get('name')}"
    if f"{IDENTITY_PREFIX}{role}" not in (spec.get("uris") or []):
        report.problem(cert_label, f"uris must contain {IDENTITY_PREFIX}{role} (the identity roles check)")
    for name in service_names:
        if name not in (spec.get("dnsNames") or []):
            report.problem(cert_label, f"dnsNames must contain the Service name {name}")
    for usage in ("server auth", "client auth"):
        if usage not in (spec.get("usages") or []):
            report.problem(cert_label, f"usages must include {usage!r}")


def _check_health_probes(label: str, env: dict[str, str], container: dict[str, Any], report: Report) -> None:
    health_port = env.get("ATTEST_HEALTH_PORT", "")
    if not health_port.isdigit() or int(health_port) == 0:
        report.problem(label, "ATTEST_HEALTH_PORT is not set: kubelet probes cannot pass mutual TLS")
        return
    for probe in ("readinessProbe", "livenessProbe"):
        grpc_probe = (container.get(probe) or {}).get("grpc") or {}
        if not grpc_probe:
            continue  # reported by check_project
        if grpc_probe.get("port") != int(health_port):
            report.problem(label, f"{probe} must use the health port {health_port}, not {grpc_probe.get('port')}")
        service = grpc_probe.get("service") or ""
        expected = LIVENESS_SERVICE if probe == "livenessProbe" else ""
        if service != expected:
            report.problem(label, f"{probe} asks for service {service!r}; expected {expected!r}")


def check_network_policies(resources: list[tuple[Resource, Path]], where: str, report: Report) -> None:
    policies = [res for res, _ in resources if res.get("kind") == "NetworkPolicy"]
    deployments = [res for res, _ in resources if res.get("kind") == "Deployment" and is_attest(res)]
    for dep in deployments:
        role = component(dep)
        if role not in ATTEST_ROLES:
            continue
        labels = pod_labels(dep)
        applying = [p for p in policies
                    if "Ingress" in ((p.get("spec") or {}).get("policyTypes") or ["Ingress"])
                    and selector_selects((p.get("spec") or {}).get("podSelector"), labels)]
        label = f"{where} {ident(dep)}"
        if not applying:
            report.problem(label, "no NetworkPolicy restricts who reaches its pods")
            continue
        for policy in applying:
            for rule in (policy.get("spec") or {}).get("ingress") or []:
                _check_ingress_rule(label, ident(policy), role, rule, deployments, report)


def _check_ingress_rule(label: str, policy: str, role: str, rule: dict[str, Any],
                        deployments: list[Resource], report: Report) -> None:
    peers = rule.get("from") or []
    if not peers:
        report.problem(label, f"{policy} admits every source (an ingress rule without `from`)")
        return
    for peer in peers:
        if "ipBlock" in peer:
            report.problem(label, f"{policy} admits an ipBlock")
            continue
        selector = peer.get("podSelector")
        if role == "gateway":
            if (selector or {}).get("matchLabels", {}).get(FRONTEND_LABEL[0]) != FRONTEND_LABEL[1]:
                report.problem(label, f"{policy} admits pods not labelled {FRONTEND_LABEL[0]}: \"{FRONTEND_LABEL[1]}\"")
            continue
        reached_from = {component(d) for d in deployments if selector_selects(selector, pod_labels(d))}
        if "namespaceSelector" in peer or selector is None or not reached_from or reached_from - ROLE_CALLERS:
            report.problem(label, f"{policy} admits more than the gateway's pods")


# --- scale-out: headless role Services, dns:/// addresses, keepalive, connection age -------------

CALLED_ROLES = tuple(role for role in ATTEST_ROLES if role != "gateway")  # what the gateway dials
DNS_SCHEME = "dns:///"
CLUSTER_DOMAIN = "cluster.local"
KEEPALIVE = "ATTEST_GRPC_KEEPALIVE_SECONDS"
KEEPALIVE_TIMEOUT = "ATTEST_GRPC_KEEPALIVE_TIMEOUT_SECONDS"
MAX_CONNECTION_AGE = "ATTEST_GRPC_MAX_CONNECTION_AGE_SECONDS"
MAX_CONNECTION_AGE_GRACE = "ATTEST_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS"
SHUTDOWN_GRACE = "ATTEST_SHUTDOWN_GRACE_SECONDS"
CONNECTION_SETTINGS = (KEEPALIVE, KEEPALIVE_TIMEOUT, MAX_CONNECTION_AGE, MAX_CONNECTION_AGE_GRACE,
                       SHUTDOWN_GRACE)
DIAGNOSIS_TIMEOUT = "ATTEST_DIAGNOSIS_TIMEOUT_SECONDS"
DIAGNOSIS_TIMEOUT_DEFAULT = 60.0  # GatewaySettings.diagnosis_timeout_seconds
TERMINATION_GRACE_DEFAULT = 30  # Kubernetes' terminationGracePeriodSeconds


def addr_env(role: str) -> str:
    return f"ATTEST_{role.upper()}_ADDR"


def dns_target(target: str) -> tuple[str, int] | None:
    """(host, port) of a `dns:///host:port` target; None for any other target."""
    if not target.startswith(DNS_SCHEME):
        return None
    host, sep, port = target[len(DNS_SCHEME):].rpartition(":")
    return (host, int(port)) if sep and host and port.isdigit() else None


def role_target(env: Env, role: str, label: str, spread: str, report: Report) -> tuple[str, int] | None:
    """(host, port) the gateway dials for `role`; a problem where ATTEST_<ROLE>_ADDR is set (or
    at `label` if it is not) when that is no dns:/// target."""
    name = addr_env(role)
    value, where = env.get(name, ("", label))
    target = dns_target(value)
    if target is None:
        report.problem(where, f"{name}={value!r} is not a {DNS_SCHEME}<host>:<port> target "
                              f"(round_robin over every {spread})")
    return target


def _seconds(env: Env, name: str, label: str, report: Report) -> float | None:
    """A positive number of seconds from `env`, else a problem where it is set (None)."""
    value, where = env.get(name, ("", label))
    if not value:
        report.problem(label, f"{name} is not set (keepalive and connection age)")
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        report.problem(where, f"{name}={value!r} is not a positive number of seconds")
        return None
    return seconds


def diagnosis_deadline(gateway_env: Env, report: Report) -> float:
    """The gateway's diagnosis deadline: every call to a role ends within it."""
    if DIAGNOSIS_TIMEOUT not in gateway_env:
        return DIAGNOSIS_TIMEOUT_DEFAULT
    return _seconds(gateway_env, DIAGNOSIS_TIMEOUT, "", report) or DIAGNOSIS_TIMEOUT_DEFAULT


def check_connection_settings(label: str, env: Env, deadline: float, report: Report) -> float | None:
    """Keepalive and connection-age settings of one process; returns the longest grace it gives
    calls in flight (to compare with the time before SIGKILL), or None if a setting is wrong."""
    values = {name: _seconds(env, name, label, report) for name in CONNECTION_SETTINGS}
    keepalive, timeout = values[KEEPALIVE], values[KEEPALIVE_TIMEOUT]
    if keepalive is not None and timeout is not None and timeout >= keepalive:
        report.problem(env[KEEPALIVE_TIMEOUT][1],
                       f"{KEEPALIVE_TIMEOUT} {timeout:g} must be shorter than {KEEPALIVE} {keepalive:g}")
    for name, when in ((MAX_CONNECTION_AGE_GRACE, "on a connection closed for its age"),
                       (SHUTDOWN_GRACE, "in a stopping process")):
        grace = values[name]
        if grace is not None and grace < deadline:
            report.problem(env[name][1], f"{name} {grace:g} is shorter than the gateway's diagnosis "
                                         f"deadline {DIAGNOSIS_TIMEOUT} {deadline:g}: calls in "
                                         f"flight {when} would be cut")
    if any(value is None for value in values.values()):
        return None
    return max(values[MAX_CONNECTION_AGE_GRACE] or 0.0, values[SHUTDOWN_GRACE] or 0.0)


def _target_port(entry: dict[str, Any], pod: dict[str, Any]) -> Any:
    """The container port a Service port entry sends to (a name resolved in the pod)."""
    target = entry.get("targetPort", entry.get("port"))
    for container in pod.get("containers") or []:
        for port in container.get("ports") or []:
            if isinstance(target, str) and port.get("name") == target:
                return port.get("containerPort")
    return target


def check_scale_out(resources: list[tuple[Resource, Path]], where: str, report: Report, root: Path) -> None:
    """The roles' Services are headless, the gateway dials them as dns:/// targets their
    Certificates name, and every process keeps alive and ages its connections consistently."""
    def label(res: Resource, src: Path) -> str:
        return f"{where} {rel(src, root)} {ident(res)}"

    config_maps = {str((res.get("metadata") or {}).get("name")): (res.get("data") or {}, label(res, src))
                   for res, src in resources if res.get("kind") == "ConfigMap"}
    certificates = {(res.get("spec") or {}).get("secretName"): (res, src)
                    for res, src in resources if res.get("kind") == "Certificate"}
    services = [(res, src) for res, src in resources if res.get("kind") == "Service"]
    deployments = {component(res): (res, src) for res, src in resources
                   if res.get("kind") == "Deployment" and is_attest(res) and component(res) in ATTEST_ROLES}

    def env_of(role: str) -> list[tuple[str, dict[str, Any], Env]]:
        dep, src = deployments[role]
        return [(f"{label(dep, src)} container {c.get('name')}", c,
                 container_env_sources(c, config_maps, f"{label(dep, src)} container {c.get('name')}"))
                for c in pod_spec(dep).get("containers") or []]

    gateway = env_of("gateway") if "gateway" in deployments else []
    deadline = diagnosis_deadline(gateway[0][2], report) if gateway else DIAGNOSIS_TIMEOUT_DEFAULT

    for role in CALLED_ROLES:
        if role not in deployments:
            continue  # reported by check_project
        dep, _ = deployments[role]
        pod = pod_spec(dep)
        hosts: dict[str, tuple[Resource, Path]] = {}
        for svc, src in services:
            spec = svc.get("spec") or {}
            if not selects(spec.get("selector") or {}, pod_labels(dep)):
                continue
            meta = svc.get("metadata") or {}
            hosts[f"{meta.get('name')}.{meta.get('namespace', 'default')}.svc.{CLUSTER_DOMAIN}"] = (svc, src)
            if spec.get("clusterIP") != "None":
                report.problem(label(svc, src), "must be headless (clusterIP: None): kube-proxy balances "
                                                "connections, not calls: the gateway's channel would reach one pod")
            for entry in spec.get("ports") or []:
                if _target_port(entry, pod) != entry.get("port"):
                    report.problem(label(svc, src), f"port {entry.get('port')} goes to container port "
                                                    f"{_target_port(entry, pod)}: a headless Service does "
                                                    f"not translate ports, the gateway dials the pod")
        for gateway_label, _, env in gateway:
            target = role_target(env, role, gateway_label, f"pod of the {role}'s headless Service", report)
            if target is None:
                continue
            host, port = target
            name = addr_env(role)
            addr_where = env[name][1]
            if host not in hosts:
                report.problem(addr_where, f"{name} dials {host}, not the {role}'s Service: expected one "
                                           f"of {sorted(hosts)}")
                continue
            svc, src = hosts[host]
            ports = [entry.get("port") for entry in (svc.get("spec") or {}).get("ports") or []]
            if port not in ports:
                report.problem(addr_where, f"{name} dials port {port}, not a port of {ident(svc)} {ports}")
            for _, container, role_env in env_of(role):
                secret = _secret_of_path(role_env.get(TLS_ENV[1], ("", ""))[0], container, pod)
                if secret not in certificates:
                    continue  # reported by check_tls_and_probes
                cert, cert_src = certificates[secret]
                if host not in ((cert.get("spec") or {}).get("dnsNames") or []):
                    report.problem(label(cert, cert_src), f"dnsNames must contain {host}: the gateway "
                                                          f"dials it ({name}) and checks that name")

    for role in ATTEST_ROLES:
        if role not in deployments:
            continue
        dep, src = deployments[role]
        graces = [check_connection_settings(where_, env, deadline, report) for where_, _, env in env_of(role)]
        grace = max((g for g in graces if g is not None), default=None)
        termination = pod_spec(dep).get("terminationGracePeriodSeconds", TERMINATION_GRACE_DEFAULT)
        if grace is not None and not (isinstance(termination, int) and termination > grace):
            report.problem(label(dep, src), f"terminationGracePeriodSeconds {termination} must exceed "
                                            f"the {grace:g} s its calls in flight get "
                                            f"({SHUTDOWN_GRACE}, {MAX_CONNECTION_AGE_GRACE}): SIGKILL "
                                            f"would cut them")


def compose_duration(value: object) -> float | None:
    """Seconds of a compose duration (`80s`, `1m30s`, `2m`); None if unreadable."""
    text, total, number = str(value).strip(), 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for char in text:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total, number = total + float(number) * units[char], ""
        else:
            return None
    return total if text and not number else None


def check_compose_scale_out(services: dict[str, Any], where: str, report: Report) -> None:
    """The gateway dials every role as a dns:/// target of its compose service (all replicas), and
    the roles can be scaled and stopped without cutting calls."""
    def env_of(name: str) -> Env:
        env = (services.get(name) or {}).get("environment") or {}
        env = env if isinstance(env, dict) else dict(str(item).partition("=")[::2] for item in env)
        return {str(k): (str(v), f"{where}: service {name!r}") for k, v in env.items()}

    gateway = env_of("gateway")
    deadline = diagnosis_deadline(gateway, report)
    for role in CALLED_ROLES:
        target = role_target(gateway, role, f"{where}: service 'gateway'", "replica", report)
        if target is None:
            continue
        host, port = target
        name = addr_env(role)
        if host not in services:
            report.problem(where, f"service 'gateway': {name} dials {host!r}, not a compose service")
        elif host != role:
            report.problem(where, f"service 'gateway': {name} dials {host!r}, not the service {role!r}")
        elif env_of(role).get(f"ATTEST_{role.upper()}_PORT", ("", ""))[0] != str(port):
            report.problem(where, f"service 'gateway': {name} dials port {port}, not the {role}'s "
                                  f"ATTEST_{role.upper()}_PORT")
    for role in ATTEST_ROLES:
        if role not in services:
            continue  # reported by check_compose
        svc = services[role] or {}
        if role != "gateway" and svc.get("container_name"):
            report.problem(where, f"service {role!r} sets container_name: it cannot be scaled")
        grace = check_connection_settings(f"{where}: service {role!r}", env_of(role), deadline, report)
        stop = compose_duration(svc.get("stop_grace_period", "10s"))
        if grace is not None and not (stop is not None and stop > grace):
            report.problem(where, f"service {role!r}: stop_grace_period {svc.get('stop_grace_period', '10s')} "
                                  f"must exceed the {grace:g} s its calls in flight get: SIGKILL would cut them")


# --- least privilege ----------------------------------------------------------------------------

# Secret values compose must take from attest.env (`${...}`), never a value written in the file.
COMPOSE_SECRETS = ("ATTEST_AUTH_TOKEN", "ATTEST_DATABASE_URL", "ATTEST_MODEL_API_KEY")


def _not_read(role: str, names: dict[str, str], report: Report) -> None:
    """One problem per ATTEST_ variable (name -> where it is set) that `role` does not read."""
    for name in foreign_variables(role, names):
        report.problem(names[name], f"{name} is given to the {role}, which does not read it "
                                    f"(shared/role_environment.py): give it only to the roles that do")


def check_least_privilege(resources: list[tuple[Resource, Path]], where: str, report: Report, root: Path) -> None:
    """Each Attest container's variables (ConfigMaps, Secrets, `env`) are settings its role
    reads; it mounts no other role's certificate Secret; each Certificate names its own role."""
    def label(res: Resource, src: Path) -> str:
        return f"{where} {rel(src, root)} {ident(res)}"

    data_of: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
    for res, src in resources:
        if res.get("kind") in ("ConfigMap", "Secret"):
            keys = {**(res.get("data") or {}), **(res.get("stringData") or {})}
            data_of[(str(res.get("kind")), str((res.get("metadata") or {}).get("name")))] = (keys, label(res, src))
    cert_roles: dict[str, str] = {}
    for res, src in resources:
        if res.get("kind") != "Certificate":
            continue
        spec = res.get("spec") or {}
        roles = [uri[len(IDENTITY_PREFIX):] for uri in spec.get("uris") or [] if str(uri).startswith(IDENTITY_PREFIX)]
        dns = [str(name) for name in spec.get("dnsNames") or []]
        for role in roles:
            cert_roles[str(spec.get("secretName"))] = role
            if role in ATTEST_ROLES and role_tls_name(role) not in dns:
                report.problem(label(res, src), f"dnsNames must contain {role_tls_name(role)!r}: the gateway "
                                                f"requires that name of the {role} it reaches")
        for other in ATTEST_ROLES:
            if other not in roles and role_tls_name(other) in dns:
                report.problem(label(res, src), f"dnsNames contain {role_tls_name(other)!r}, the {other}'s TLS "
                                                f"name: this certificate could pass for the {other}")

    for res, src in resources:
        role = component(res)
        if res.get("kind") != "Deployment" or not is_attest(res) or role not in ATTEST_ROLES:
            continue
        pod = pod_spec(res)
        for volume in pod.get("volumes") or []:
            owner = cert_roles.get(str((volume.get("secret") or {}).get("secretName")))
            if owner is not None and owner != role:
                report.problem(label(res, src), f"mounts the {owner}'s certificate and key "
                                                f"(Secret {volume['secret']['secretName']}): each role holds only its own")
        for container in pod.get("containers") or []:
            here = f"{label(res, src)} container {container.get('name')}"
            names: dict[str, str] = {}
            for source in container.get("envFrom") or []:
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    ref = source.get(key)
                    if ref:
                        keys, set_in = data_of.get((kind, str(ref.get("name"))), ({}, here))
                        names.update({str(name): f"{set_in} (envFrom of {here})" for name in keys})
            names.update({str(item.get("name")): here for item in container.get("env") or []})
            _not_read(role, names, report)


def check_compose_least_privilege(compose_dir: Path, services: dict[str, Any], where: str, report: Report) -> None:
    """Each role's service names only the settings its role reads (its `environment` and any env
    file), takes secrets from attest.env, and mounts a certificate volume of its own."""
    tls_volumes: dict[str, list[str]] = {}
    for role in ATTEST_ROLES:
        svc = services.get(role) or {}
        env = svc.get("environment") or {}
        env = env if isinstance(env, dict) else dict(str(item).partition("=")[::2] for item in env)
        here = f"{where}: service {role!r}"
        names = {str(name): here for name in env}
        env_files = svc.get("env_file") or []
        for entry in [env_files] if isinstance(env_files, (str, dict)) else env_files:
            path = compose_dir / str(entry.get("path") if isinstance(entry, dict) else entry)
            path = path if path.is_file() else path.with_name(path.name + ".example")
            if path.is_file():
                for line in path.read_text().splitlines():
                    name = line.split("=", 1)[0].strip()
                    if name and not name.startswith("#") and "=" in line:
                        names[name] = f"{here} (env file {path.name})"
        _not_read(role, names, report)
        for name in COMPOSE_SECRETS:
            value = env.get(name)
            if value is not None and not str(value).strip().startswith("${"):
                report.problem(here, f"{name} is written in the file: take it from attest.env (${{{name}}})")
        key_dir = str(env.get("ATTEST_TLS_KEY_FILE") or "").rsplit("/", 1)[0]
        for mount in svc.get("volumes") or []:
            source, _, rest = str(mount).partition(":")
            if key_dir and rest.split(":", 1)[0] == key_dir:
                tls_volumes.setdefault(source, []).append(role)
    for source, roles in tls_volumes.items():
        if len(roles) > 1:
            report.problem(where, f"services {', '.join(repr(r) for r in roles)} share the certificate volume "
                                  f"{source!r}: each role must hold only its own key")


# --- compose ----------------------------------------------------------------------------------


def check_compose(compose_dir: Path, root: Path, report: Report) -> int:
    compose_file = compose_dir / "docker-compose.yml"
    if not compose_file.is_file():
        report.problem(rel(compose_dir, root), "docker-compose.yml is missing")
        return 0
    docs = load_docs(compose_file, report, root)
    spec = docs[0] if docs and isinstance(docs[0], dict) else {}
    where = rel(compose_file, root)
    services = spec.get("services") or {}
    if not services:
        report.problem(where, "no services")
    expected = {*ATTEST_ROLES, "postgres", "migrate", "jaeger", "certs"}
    for name in sorted(expected - set(services)):
        report.problem(where, f"service {name!r} is missing")
    for name, svc in services.items():
        svc = svc or {}
        depends = svc.get("depends_on") or {}
        for dep in depends if isinstance(depends, (list, dict)) else []:
            if dep not in services:
                report.problem(where, f"service {name!r} depends on unknown service {dep!r}")
        if name in ATTEST_ROLES and "migrate" not in depends:
            report.problem(where, f"service {name!r} does not depend on migrate")
        if svc.get("ports") and name != "gateway":
            report.problem(where, f"service {name!r} publishes ports; only the gateway may")
        env_files = svc.get("env_file") or []
        for entry in [env_files] if isinstance(env_files, (str, dict)) else env_files:
            path = entry.get("path") if isinstance(entry, dict) else entry
            required = entry.get("required", True) if isinstance(entry, dict) else True
            target = compose_dir / str(path)
            example = target.with_name(target.name + ".example")
            if not target.is_file() and required and not example.is_file():
                report.problem(
                    where, f"service {name!r}: env file {path!r} (or {path}.example) missing"
                )
    for name in ATTEST_ROLES:
        svc = services.get(name) or {}
        env = svc.get("environment") or {}
        env = env if isinstance(env, dict) else dict(str(item).partition("=")[::2] for item in env)
        missing = [var for var in (*TLS_ENV, "ATTEST_HEALTH_PORT") if not env.get(var)]
        if name in services and missing:
            report.problem(where, f"service {name!r}: {', '.join(missing)} not set (mutual TLS, health port)")
        if _truthy(env.get("ATTEST_INSECURE", "")):
            report.problem(where, f"service {name!r} sets ATTEST_INSECURE: the services must talk mutual TLS")
    if not (compose_dir / "attest.env").is_file() and not (compose_dir / "attest.env.example").is_file():
        report.problem(where, "env file 'attest.env' (or attest.env.example) missing: the values "
                              "compose fills in (`--env-file`)")
    check_compose_least_privilege(compose_dir, services, where, report)
    if "postgres" in services and not (services["postgres"] or {}).get("healthcheck"):
        report.problem(where, "postgres has no healthcheck")
    check_compose_scale_out(services, where, report)

    docker = shutil.which("docker")
    works = False
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
        works = probe.returncode == 0
    if not works:
        report.notes.append(
            "`docker compose` is not available here: skipped `docker compose config`"
        )
    else:
        env_file = compose_dir / "attest.env"
        created = False
        if not env_file.exists() and (compose_dir / "attest.env.example").is_file():
            shutil.copy(compose_dir / "attest.env.example", env_file)
            created = True
        try:
            done = subprocess.run(
                [docker, "compose", "--env-file", str(env_file), "-f", str(compose_file), "config", "-q"],
                capture_output=True, text=True,
            )
        finally:
            if created:
                env_file.unlink()
        if done.returncode != 0:
            report.problem(where, f"docker compose config: {done.stderr.strip()}")
    return len(services)


# --- main -------------------------------------------------------------------------------------


def run(deploy_dir: Path, version: str = KUBERNETES_VERSION) -> Report:
    report = Report()
    root = deploy_dir.resolve()
    yaml_files = sorted(p for ext in ("*.yaml", "*.yml") for p in root.rglob(ext))
    for path in yaml_files:
        load_docs(path, report, root)

    k8s = root / "k8s"
    kustomizations = (
        sorted(p.parent for name in KUSTOMIZATION_FILES for p in k8s.rglob(name))
        if k8s.is_dir()
        else []
    )
    if not kustomizations:
        report.problem(rel(k8s, root), "no kustomization found")
    used: set[Path] = set()
    built = 0
    n_built = 0
    for directory in kustomizations:
        docs = load_docs(kustomization_file(directory), report, root)  # type: ignore[arg-type]
        if docs and isinstance(docs[0], dict) and docs[0].get("kind") == "Component":
            # Alone, only its files are checked; its resources are checked where it is used.
            build(directory, root, report, (), [], used, standalone=True)
            continue
        resources = build(directory, root, report, (), None, used)
        where = f"[{rel(directory, root)}]"
        validate_schema(resources, version, where, report, root)
        check_project(resources, where, report)
        check_tls_and_probes(resources, where, report)
        check_network_policies(resources, where, report)
        check_scale_out(resources, where, report, root)
        check_least_privilege(resources, where, report, root)
        built += len(resources)
        n_built += 1
    for path in yaml_files:
        if path.is_relative_to(k8s) and path.resolve() not in used:
            report.problem(rel(path, root), "not referenced by any kustomization")

    services = check_compose(root / "compose", root, report)
    report.notes.insert(
        0,
        f"{len(yaml_files)} YAML files parsed; {n_built} kustomizations built, "
        f"{built} resources validated against Kubernetes {version} schemas "
        f"(kubernetes-validate {kubernetes_validate.__version__}, strict); "
        f"compose: {services} services",
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploy-dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    args = parser.parse_args(argv)
    report = run(args.deploy_dir, args.kubernetes_version)
    for line in report.notes:
        print(f"deploy-check: {line}")
    if report.problems:
        for line in report.problems:
            print(line, file=sys.stderr)
        print(f"deploy-check: {len(report.problems)} problem(s)", file=sys.stderr)
        return 1
    print("deploy-check: OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
