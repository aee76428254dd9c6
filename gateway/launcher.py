"""Start the six services as separate processes on loopback, and stop them again.

Used by `make run` / `make demo` and by the integration tests, so that what the tests start is
exactly what a person starts. Each process prints `READY <service> <port>` once it listens; the
downstream roles start first (port 0 = an ephemeral port unless fixed ports are asked for), then
the gateway is pointed at the ports they actually bound.

Every hop is mutual TLS: at start the cluster creates a throwaway CA and one certificate per
service, plus `intruder` (signed by the same CA, allowed to call nothing: the security tests
present it), in `cluster.tls_dir` (removed at stop). With ATTEST_INSECURE=1 in the environment
nothing is created and everything is plaintext.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from pydantic import TypeAdapter

from shared.tls import certificate_files, files_channel_credentials, write_throwaway_pki

ROLES = ("planner", "executor", "gatekeeper", "verifier", "composer")
MODULES = {role: f"services.{role}" for role in ROLES} | {"gateway": "gateway"}
DEFAULT_PORTS = {"gateway": 50050, "planner": 50051, "executor": 50052, "gatekeeper": 50053,
                 "verifier": 50054, "composer": 50055}
REPO_ROOT = Path(__file__).resolve().parent.parent
# A certificate the CA signs but no role admits: what an attacker inside the mesh would hold.
INTRUDER = "intruder"


class LaunchError(RuntimeError):
    pass


@dataclass
class ServiceProcess:
    name: str
    process: subprocess.Popen[str]
    log_path: Path
    port: int = 0
    _ready: threading.Event = field(default_factory=threading.Event)

    def _watch_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "READY" and parts[1] == self.name:
                self.port = int(parts[2])
                self._ready.set()
        self._ready.set()  # the process ended: wake any waiter

    def wait_ready(self, timeout: float) -> int:
        threading.Thread(target=self._watch_stdout, daemon=True).start()
        if not self._ready.wait(timeout) or not self.port:
            tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            raise LaunchError(f"{self.name} did not become ready (exit code {self.process.poll()}):\n{tail}")
        return self.port


class Cluster:
    """The six processes. Environment for all of them comes from `env` (plus the caller's)."""

    def __init__(self, env: dict[str, str] | None = None, *, log_dir: Path | None = None,
                 fixed_ports: bool = False) -> None:
        self._env = {**os.environ, **(env or {})}
        self._env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / "gen")] + ([self._env["PYTHONPATH"]] if self._env.get("PYTHONPATH") else [])
        )
        self._env.setdefault("PYTHONUNBUFFERED", "1")
        self.log_dir = log_dir or REPO_ROOT / "var" / "logs"
        self._fixed_ports = fixed_ports
        self.processes: dict[str, ServiceProcess] = {}
        # ca.pem, <name>.pem and <name>-key.pem for the six services and INTRUDER; None in plaintext.
        self.tls_dir: Path | None = None

    @property
    def insecure(self) -> bool:
        """Whether ATTEST_INSECURE asks for plaintext (read as the services read it)."""
        return TypeAdapter(bool).validate_python(self._env.get("ATTEST_INSECURE") or False)

    def _ensure_certificates(self) -> None:
        if self.insecure or self.tls_dir is not None:
            return
        self.tls_dir = Path(tempfile.mkdtemp(prefix="attest-tls-"))
        write_throwaway_pki(self.tls_dir, [*MODULES, INTRUDER])

    def _tls_env(self, name: str) -> dict[str, str]:
        if self.tls_dir is None:
            return {}
        files = certificate_files(self.tls_dir, name)
        return {"ATTEST_TLS_CA_FILE": str(files.ca_file), "ATTEST_TLS_CERT_FILE": str(files.cert_file),
                "ATTEST_TLS_KEY_FILE": str(files.key_file)}

    def credentials(self, identity: str = "gateway") -> grpc.ChannelCredentials | None:
        """Client credentials presenting `identity`'s certificate (None when plaintext)."""
        if self.tls_dir is None:
            return None
        return files_channel_credentials(certificate_files(self.tls_dir, identity))

    def channel(self, name: str, identity: str = "gateway") -> grpc.Channel:
        """A new channel to the service `name`, as `identity` (the gateway by default: the one
        caller the roles admit). The gateway's public port is plaintext here (callers present
        bearer tokens). The caller closes it (`with cluster.channel(...) as channel:`)."""
        credentials = self.credentials(identity)
        if credentials is None or name == "gateway":
            return grpc.insecure_channel(self.address(name))
        return grpc.secure_channel(self.address(name), credentials)

    def _spawn(self, name: str, extra_env: dict[str, str]) -> ServiceProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        env = {**self._env, **self._tls_env(name), **extra_env}
        port_var = f"ATTEST_{name.upper()}_PORT"
        if port_var not in extra_env:
            env[port_var] = str(DEFAULT_PORTS[name] if self._fixed_ports else 0)
        process = subprocess.Popen(
            [sys.executable, "-m", MODULES[name]],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log_path.open("a" if name in self.processes else "w"),
            stdin=subprocess.DEVNULL,
            text=True,
        )
        service = ServiceProcess(name=name, process=process, log_path=log_path)
        self.processes[name] = service
        return service

    def start(self, timeout: float = 60.0) -> str:
        """Start every role; returns the gateway's address."""
        try:
            self._ensure_certificates()
            downstream = {role: self._spawn(role, {}) for role in ROLES}
            addrs = {
                f"ATTEST_{role.upper()}_ADDR": f"127.0.0.1:{service.wait_ready(timeout)}"
                for role, service in downstream.items()
            }
            gateway = self._spawn("gateway", addrs)
            return f"127.0.0.1:{gateway.wait_ready(timeout)}"
        except BaseException:
            self.stop()
            raise

    def restart(self, name: str, timeout: float = 60.0) -> int:
        """Start `name` again on the port it had (after it died or was killed), with the same
        environment, so that the gateway's channel to it reconnects. Returns the port."""
        previous = self.processes[name]
        if previous.process.poll() is None:
            previous.process.kill()
        previous.process.wait()
        extra = {f"ATTEST_{name.upper()}_PORT": str(previous.port)}
        if name == "gateway":
            extra |= {f"ATTEST_{role.upper()}_ADDR": self.address(role) for role in ROLES}
        return self._spawn(name, extra).wait_ready(timeout)

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.processes[name].port}"

    def stop(self, grace: float = 10.0) -> None:
        for service in self.processes.values():
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for service in self.processes.values():
            try:
                service.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                service.process.kill()
                service.process.wait()
        if self.tls_dir is not None:
            shutil.rmtree(self.tls_dir, ignore_errors=True)
            self.tls_dir = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.launcher",
                                     description="Start the six Attest services on loopback.")
    parser.add_argument("--questions", type=Path, help="ask each line of this file, print the answers, then stop")
    parser.add_argument("--fixed-ports", action="store_true", help="use the default ports 50050-50055")
    args = parser.parse_args(argv)

    cluster = Cluster(fixed_ports=args.fixed_ports)
    try:
        gateway_addr = cluster.start()
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        transport = "plaintext (ATTEST_INSECURE)" if cluster.tls_dir is None else f"mutual TLS, certificates in {cluster.tls_dir}"
        print(f"Attest is up: gateway on {gateway_addr} (logs in {cluster.log_dir}; between services: {transport})",
              flush=True)
        if args.questions:
            from gateway.cli import ask_and_print

            questions = [q.strip() for q in args.questions.read_text(encoding="utf-8").splitlines() if q.strip()]
            failures = sum(ask_and_print(gateway_addr, q) != 0 for q in questions)
            return 1 if failures else 0
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while all(s.process.poll() is None for s in cluster.processes.values()):
            time.sleep(0.5)
        dead = [name for name, s in cluster.processes.items() if s.process.poll() is not None]
        print(f"error: {', '.join(dead)} exited; see {cluster.log_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
