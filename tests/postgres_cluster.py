"""A throwaway PostgreSQL cluster for the tests (DESIGN §8: initdb/pg_ctl as the postgres user
when running as root, data in a temp dir, loopback only, a free port)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    pass


def _bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if candidates:
        return Path(candidates[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresUnavailable("no PostgreSQL server binaries (Debian package 'postgresql')")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresCluster:
    def __init__(self) -> None:
        self._bin = _bin_dir()
        self._dir = Path(tempfile.mkdtemp(prefix="attest-pg-"))
        self._data = self._dir / "data"
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        command = [str(self._bin / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise PostgresUnavailable(f"{args[0]} failed: {result.stderr.strip()[-500:]}")

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> PostgresCluster:
        if self._as_postgres:
            shutil.chown(self._dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self._data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self._dir} -c fsync=off"
        self._run("pg_ctl", "-D", str(self._data), "-o", options, "-w", "-t", "60", "-l",
                  str(self._dir / "server.log"), "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self._data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
