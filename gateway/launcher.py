"""Start the six services as separate processes on loopback, and stop them again.

Used by `make run` / `make demo` and by the integration tests, so that what the tests start is
exactly what a person starts. Each process prints `READY <service> <port>` once it listens; the
downstream roles start first (port 0 = an ephemeral port unless fixed ports are asked for), then
the gateway is pointed at the ports they actually bound.

Every hop is mutual TLS: at start the cluster creates a throwaway CA and one certificate per
service, plus `intruder` (signed by the same CA, allowed to call nothing: the security tests
present it), in `cluster.tls_dir` (removed at stop). With ATTEST_INSECURE=1 in the environment
nothing is created and everything is plaintext.

A role may run as several replicas (`Cluster(replicas={"executor": 3})`, `--replicas executor=3`):
each is its own process on its own port (the first keeps the role's name, the others are
`executor-2`, `executor-3` in `processes` and in the log file names), and the gateway reaches them
through one `ipv4:` target listing every replica, over which its channel spreads the calls
(shared/channels.py).
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


# The most replicas of one role the launcher starts (each is a Python process).
MAX_REPLICAS = 16


class LaunchError(RuntimeError):
    pass


def replica_name(role: str, index: int) -> str:
    """The instance name of `role`'s replica `index` (0-based): the role's own name for the first."""
    return role if index == 0 else f"{role}-{index + 1}"


def parse_replicas(specs: list[str]) -> dict[str, int]:
    """`["executor=3", "verifier=2,composer=2"]` -> {"executor": 3, ...}; ValueError naming what is wrong."""
    counts: dict[str, int] = {}
    for spec in specs:
        for item in filter(None, (part.strip() for part in spec.split(","))):
            role, sep, number = item.partition("=")
            role = role.strip()
            if not sep or role not in ROLES:
                hint = " (the gateway is the one entry point locally)" if role == "gateway" else ""
                raise ValueError(f"{item!r}: expected ROLE=N with ROLE one of {', '.join(ROLES)}{hint}")
            try:
                count = int(number)
            except ValueError:
                raise ValueError(f"{item!r}: the number of replicas must be a whole number") from None
            if not 1 <= count <= MAX_REPLICAS:
                raise ValueError(f"{item!r}: between 1 and {MAX_REPLICAS} replicas")
            counts[role] = count
    return counts


@dataclass
class ServiceProcess:
    name: str
    process: subprocess.Popen[str]
    log_path: Path
    port: int = 0
    role: str = ""
    _ready: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.role = self.role or self.name

    def _watch_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "READY" and parts[1] == self.role:
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
    """The six services' processes. Environment for all of them comes from `env` (plus the
    caller's); `replicas` says how many processes a role runs (1 unless named)."""

    def __init__(self, env: dict[str, str] | None = None, *, log_dir: Path | None = None,
                 fixed_ports: bool = False, replicas: dict[str, int] | None = None) -> None:
        self._env = {**os.environ, **(env or {})}
        self._env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / "gen")] + ([self._env["PYTHONPATH"]] if self._env.get("PYTHONPATH") else [])
        )
        self._env.setdefault("PYTHONUNBUFFERED", "1")
        self.log_dir = log_dir or REPO_ROOT / "var" / "logs"
        self._fixed_ports = fixed_ports
        self.replica_counts = {role: 1 for role in ROLES} | dict(replicas or {})
        unknown = sorted(set(self.replica_counts) - set(ROLES))
        if unknown:
            raise LaunchError(f"replicas of {', '.join(unknown)}: only {', '.join(ROLES)} can run as several")
        # Every process by instance name (see replica_name).
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

    def _spawn(self, name: str, extra_env: dict[str, str], role: str | None = None) -> ServiceProcess:
        """Start the process `name`, an instance of `role` (the name itself unless a replica)."""
        role = role or name
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        env = {**self._env, **self._tls_env(role), **extra_env}
        port_var = f"ATTEST_{role.upper()}_PORT"
        if port_var not in extra_env:
            # Fixed ports for the first instance only; further replicas take free ones.
            env[port_var] = str(DEFAULT_PORTS[role] if self._fixed_ports and name == role else 0)
        process = subprocess.Popen(
            [sys.executable, "-m", MODULES[role]],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log_path.open("a" if name in self.processes else "w"),
            stdin=subprocess.DEVNULL,
            text=True,
        )
        service = ServiceProcess(name=name, process=process, log_path=log_path, role=role)
        self.processes[name] = service
        return service

    def start(self, timeout: float = 60.0) -> str:
        """Start every role (each of its replicas); returns the gateway's address."""
        try:
            self._ensure_certificates()
            downstream = [self._spawn(replica_name(role, index), {}, role)
                          for role in ROLES for index in range(self.replica_counts[role])]
            for service in downstream:
                service.wait_ready(timeout)
            gateway = self._spawn("gateway", self._role_targets())
            return f"127.0.0.1:{gateway.wait_ready(timeout)}"
        except BaseException:
            self.stop()
            raise

    def _role_targets(self) -> dict[str, str]:
        return {f"ATTEST_{role.upper()}_ADDR": self.target(role) for role in ROLES}

    def restart(self, name: str, timeout: float = 60.0) -> int:
        """Start the process `name` again on the port it had (after it died or was killed), with
        the same environment, so that the gateway's channel to it reconnects. Returns the port."""
        previous = self.processes[name]
        if previous.process.poll() is None:
            previous.process.kill()
        previous.process.wait()
        extra = {f"ATTEST_{previous.role.upper()}_PORT": str(previous.port)}
        if name == "gateway":
            extra |= self._role_targets()
        return self._spawn(name, extra, previous.role).wait_ready(timeout)

    def replicas(self, role: str) -> list[ServiceProcess]:
        """The processes of `role`, first replica first."""
        return [self.processes[replica_name(role, index)] for index in range(self.replica_counts.get(role, 1))]

    def address(self, name: str) -> str:
        """The `host:port` of the process `name` (one replica)."""
        return f"127.0.0.1:{self.processes[name].port}"

    def target(self, role: str) -> str:
        """What the gateway dials for `role`: its address, or an `ipv4:` list of its replicas."""
        replicas = self.replicas(role)
        if len(replicas) == 1:
            return self.address(replicas[0].name)
        return "ipv4:" + ",".join(self.address(service.name) for service in replicas)

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
    parser.add_argument("--fixed-ports", action="store_true",
                        help="use the default ports 50050-50055 (further replicas take free ports)")
    parser.add_argument("--replicas", action="append", default=[], metavar="ROLE=N[,ROLE=N]",
                        help=f"run N processes of a role (1 to {MAX_REPLICAS}); the gateway spreads calls over them")
    args = parser.parse_args(argv)
    try:
        replicas = parse_replicas(args.replicas)
    except ValueError as exc:
        parser.error(f"--replicas {exc}")

    cluster = Cluster(fixed_ports=args.fixed_ports, replicas=replicas)
    try:
        gateway_addr = cluster.start()
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        transport = "plaintext (ATTEST_INSECURE)" if cluster.tls_dir is None else f"mutual TLS, certificates in {cluster.tls_dir}"
        print(f"Attest is up: gateway on {gateway_addr} (logs in {cluster.log_dir}; between services: {transport})",
              flush=True)
        for role, count in cluster.replica_counts.items():
            if count > 1:
                print(f"  {role}: {count} replicas, {cluster.target(role)}", flush=True)
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
