"""Start the six services as separate processes on loopback, and stop them again.

Used by `make run` / `make demo` and by the integration tests, so that what the tests start is
exactly what a person starts. Each process prints `READY <service> <port>` once it listens; the
downstream roles start first (port 0 = an ephemeral port unless fixed ports are asked for), then
the gateway is pointed at the ports they actually bound.

A role's port is `ATTEST_<ROLE>_PORT` when the environment sets it, else the default port
(`--fixed-ports`) or an ephemeral one. A port already in use stops that role with one line naming
the port and the role (servers never share a port, shared/server.py).

Every hop is mutual TLS: at start the cluster creates a throwaway CA and one certificate per
service, plus `intruder` (signed by the same CA, allowed to call nothing: the security tests
present it), in `cluster.tls_dir` (removed at stop): a directory `<pid>-*` (mode 0700, keys 0600)
under `var/tls/`, so that one left behind by a killed launcher is recognised by its dead pid and
removed at the next start. With ATTEST_INSECURE=1 in the environment nothing is created and
everything is plaintext.

`python -m gateway.launcher` (`make run`) stays up and restarts a role whose process ended, with
a growing delay while it keeps failing; the others keep serving. It records its processes in a
state file (`var/launcher.json`), through which `python -m gateway.launcher restart ROLE`
(`make restart ROLE=executor`) restarts one of them.

A role may run as several replicas (`Cluster(replicas={"executor": 3})`, `--replicas executor=3`):
each is its own process on its own port (the first keeps the role's name, the others are
`executor-2`, `executor-3` in `processes` and in the log file names), and the gateway reaches them
through one `ipv4:` target listing every replica, over which its channel spreads the calls
(shared/channels.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from pydantic import TypeAdapter

from shared.role_environment import environment_for
from shared.server import bind_failure
from shared.tls import certificate_files, files_channel_credentials, write_throwaway_pki

ROLES = ("planner", "executor", "gatekeeper", "verifier", "composer")
MODULES = {role: f"services.{role}" for role in ROLES} | {"gateway": "gateway"}
DEFAULT_PORTS = {"gateway": 50050, "planner": 50051, "executor": 50052, "gatekeeper": 50053,
                 "verifier": 50054, "composer": 50055}
REPO_ROOT = Path(__file__).resolve().parent.parent
# Where each cluster's throwaway CA and keys go, one `<pid>-*` directory per cluster.
TLS_PARENT = REPO_ROOT / "var" / "tls"
# Where `python -m gateway.launcher` records its processes for `restart`.
STATE_FILE = REPO_ROOT / "var" / "launcher.json"
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def remove_stale_tls_dirs(parent: Path) -> list[Path]:
    """Remove the `<pid>-*` key directories under `parent` whose launcher is gone (killed before
    it could clean up); returns them."""
    removed = []
    for entry in sorted(parent.iterdir()):
        pid, sep, _ = entry.name.partition("-")
        if sep and pid.isdigit() and entry.is_dir() and not _pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


@dataclass
class ServiceProcess:
    name: str
    process: subprocess.Popen[str]
    log_path: Path
    port: int = 0
    role: str = ""
    started_at: float = field(default_factory=time.monotonic)
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
            try:
                self.process.wait(5)  # its output ended: let it finish, for its exit code
            except subprocess.TimeoutExpired:
                pass
            tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            # A process that refused to start says why in one `error:` line: that line is enough.
            errors = [line for line in tail.splitlines() if line.startswith("error: ")]
            reason = errors[-1] if errors else tail
            raise LaunchError(f"{self.name} did not become ready (exit code {self.process.poll()}):\n{reason}")
        return self.port


class Cluster:
    """The six services' processes. Environment for all of them comes from `env` (plus the
    caller's); `replicas` says how many processes a role runs (1 unless named)."""

    def __init__(self, env: dict[str, str] | None = None, *, log_dir: Path | None = None,
                 fixed_ports: bool = False, replicas: dict[str, int] | None = None,
                 tls_parent: Path | None = None) -> None:
        self._env = {**os.environ, **(env or {})}
        self._env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / "gen")] + ([self._env["PYTHONPATH"]] if self._env.get("PYTHONPATH") else [])
        )
        self._env.setdefault("PYTHONUNBUFFERED", "1")
        self.log_dir = log_dir or REPO_ROOT / "var" / "logs"
        self.tls_parent = tls_parent or TLS_PARENT
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
        self.tls_parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.tls_parent.chmod(0o700)
        remove_stale_tls_dirs(self.tls_parent)
        # mkdtemp creates it 0700; the keys in it are 0600 (shared/tls.py).
        self.tls_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=self.tls_parent))
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
            # The first instance takes the port the environment names, else the default one (fixed
            # ports) or a free one; further replicas always take free ones.
            if name != role:
                env[port_var] = "0"
            else:
                env[port_var] = self._env.get(port_var) or str(DEFAULT_PORTS[role] if self._fixed_ports else 0)
        # Least privilege: the child gets only the ATTEST_ settings its role reads.
        env = environment_for(role, env)
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


# A process that ran at least this long before it ended is restarted at once; one that keeps
# ending sooner waits twice as long as the time before, from the first delay up to the longest.
STABLE_SECONDS = 30.0
FIRST_RESTART_DELAY = 1.0
LONGEST_RESTART_DELAY = 30.0


class Supervisor:
    """Keeps the processes of a started cluster running: one that ended is started again on its
    port (the others keep serving meanwhile), and the state file lists every process's pid and
    port for `restart`."""

    def __init__(self, cluster: Cluster, state_file: Path) -> None:
        self._cluster = cluster
        self._state_file = state_file
        self._delays: dict[str, float] = {}
        self._due: dict[str, float] = {}
        # The port each process serves on: a restart that failed before READY learnt none.
        self._ports = {name: service.port for name, service in cluster.processes.items()}

    def write_state(self) -> None:
        processes = {name: {"role": service.role, "pid": service.process.pid, "port": service.port}
                     for name, service in self._cluster.processes.items()}
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self._state_file.with_name(self._state_file.name + ".new")
        partial.write_text(json.dumps({"launcher_pid": os.getpid(), "processes": processes}, indent=2) + "\n",
                           encoding="utf-8")
        partial.replace(self._state_file)  # readers never see half a file

    def remove_state(self) -> None:
        try:
            if json.loads(self._state_file.read_text(encoding="utf-8")).get("launcher_pid") == os.getpid():
                self._state_file.unlink()
        except (OSError, ValueError):
            pass

    def check(self) -> None:
        """Note the processes that ended and restart those whose delay has passed."""
        now = time.monotonic()
        for name, service in list(self._cluster.processes.items()):
            code = service.process.poll()
            if code is None or name in self._due:
                continue
            ran = now - service.started_at
            delay = 0.0 if ran >= STABLE_SECONDS else min(
                LONGEST_RESTART_DELAY, max(FIRST_RESTART_DELAY, 2 * self._delays.get(name, 0.0)))
            self._delays[name] = delay
            self._due[name] = now + delay
            print(f"{name} (pid {service.process.pid}) exited with code {code}; restarting it"
                  + (f" in {delay:.0f} s" if delay else ""), flush=True)
        for name, due in sorted(self._due.items(), key=lambda item: item[1]):
            if due <= time.monotonic():
                del self._due[name]
                self._restart(name)

    def _restart(self, name: str) -> None:
        service = self._cluster.processes[name]
        service.port = service.port or self._ports[name]
        try:
            port = self._cluster.restart(name)
        except LaunchError as exc:
            service = self._cluster.processes[name]
            if service.process.poll() is None:  # hung before READY: end it, so it is tried again
                service.process.kill()
                service.process.wait()
            print(f"{name} did not restart: {exc}", file=sys.stderr, flush=True)
            return
        print(f"{name} is back on port {port} (pid {self._cluster.processes[name].process.pid})", flush=True)
        self.write_state()


def _parent_pid(pid: int) -> int | None:
    """The parent of `pid` as Linux's /proc says it (None elsewhere or when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def restart_one(name: str, state_file: Path, timeout: float = 90.0) -> int:
    """Restart the process `name` of the launcher recorded in `state_file`: it is sent SIGTERM,
    drains its calls, and the launcher starts it again on its port. Waits until it is back."""
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"error: no running launcher: {state_file} does not exist (start one with `make run`)", file=sys.stderr)
        return 1
    launcher = state.get("launcher_pid")
    if not isinstance(launcher, int) or not _pid_alive(launcher):
        print(f"error: the launcher recorded in {state_file} (pid {launcher}) is not running", file=sys.stderr)
        return 1
    processes = state.get("processes", {})
    if name not in processes:
        print(f"error: no process named {name!r}; the launcher runs {', '.join(processes)}", file=sys.stderr)
        return 2
    old_pid = processes[name]["pid"]
    if _parent_pid(old_pid) in (launcher, None) and _pid_alive(old_pid):
        os.kill(old_pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            entry = json.loads(state_file.read_text(encoding="utf-8"))["processes"].get(name)
        except (OSError, ValueError, KeyError):
            continue
        if entry and entry["pid"] != old_pid:
            print(f"{name} restarted: pid {entry['pid']}, port {entry['port']}")
            return 0
    print(f"error: {name} is not back after {timeout:.0f} s; see its log", file=sys.stderr)
    return 1


def check_fixed_ports(environ: Mapping[str, str] = os.environ) -> int:
    """Whether every role's first instance can bind its fixed port (ATTEST_<ROLE>_PORT, else the
    default): one line per taken port and exit 1, so that a second `make run` stops before it
    reloads the estate of the cluster already serving."""
    host = environ.get("ATTEST_BIND_HOST") or "127.0.0.1"
    taken = 0
    for role, default in DEFAULT_PORTS.items():
        port = environ.get(f"ATTEST_{role.upper()}_PORT") or str(default)
        reason = bind_failure(host, port) if port != "0" else None
        if reason is not None:
            print(f"error: {role} cannot listen on port {port} ({host}:{port}): {reason}", file=sys.stderr)
            taken += 1
    return 1 if taken else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.launcher",
                                     description="Start the six Attest services on loopback.")
    parser.add_argument("--questions", type=Path, help="ask each line of this file, print the answers, then stop")
    parser.add_argument("--fixed-ports", action="store_true",
                        help="use the default ports 50050-50055 (further replicas take free ports)")
    parser.add_argument("--replicas", action="append", default=[], metavar="ROLE=N[,ROLE=N]",
                        help=f"run N processes of a role (1 to {MAX_REPLICAS}); the gateway spreads calls over them")
    parser.add_argument("--log-dir", type=Path, help="where each process's log goes (default: var/logs)")
    parser.add_argument("--state-file", type=Path, default=STATE_FILE,
                        help="where the running launcher records its processes (default: %(default)s)")
    commands = parser.add_subparsers(dest="command", metavar="restart | check-ports")
    restart = commands.add_parser("restart", help="restart one process of the running launcher (make restart ROLE=...)")
    restart.add_argument("name", help="a role, or a replica such as executor-2")
    commands.add_parser("check-ports", help="exit 1 naming each role whose fixed port is taken (make run checks "
                                            "before it touches any database)")
    args = parser.parse_args(argv)
    if args.command == "restart":
        return restart_one(args.name, args.state_file)
    if args.command == "check-ports":
        return check_fixed_ports()
    try:
        replicas = parse_replicas(args.replicas)
    except ValueError as exc:
        parser.error(f"--replicas {exc}")

    cluster = Cluster(fixed_ports=args.fixed_ports, replicas=replicas, log_dir=args.log_dir)
    # Starting takes seconds (each process imports its libraries): say so before, not only after.
    print(f"start: {', '.join(ROLES)}, then the gateway, on loopback (about 10 s)", flush=True)
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
            from gateway.cli import EXIT_ANSWER, EXIT_NO_ANSWER, ask_and_print

            questions = [q.strip() for q in args.questions.read_text(encoding="utf-8").splitlines() if q.strip()]
            print(f"ask: the {len(questions)} questions of {args.questions}", flush=True)
            # A fallback or REJECT is an answer the demo shows; only a request that failed is a failure.
            failures = sum(ask_and_print(gateway_addr, q) not in (EXIT_ANSWER, EXIT_NO_ANSWER) for q in questions)
            return 1 if failures else 0
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        supervisor = Supervisor(cluster, args.state_file)
        supervisor.write_state()
        print("A process that ends is restarted; restart one yourself with `make restart ROLE=executor` "
              "(or `python -m gateway.launcher restart executor`).", flush=True)
        try:
            while True:
                time.sleep(0.5)
                supervisor.check()
        finally:
            supervisor.remove_state()
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
