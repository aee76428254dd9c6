"""`python -m shared.db.migrate`: works from any directory, fails in one readable line."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "shared.db.migrate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unreachable_database_exits_nonzero_with_one_line(tmp_path):
    result = run_cli("--url", "postgresql+psycopg://x@127.0.0.1:1/x", cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "127.0.0.1" in lines[0]


def test_invalid_url_exits_nonzero_with_one_line(tmp_path):
    result = run_cli("--url", "nosuchdriver://db", cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_migrates_a_sqlite_file_from_another_directory(tmp_path):
    database = tmp_path / "data" / "attest.db"
    result = run_cli("--url", f"sqlite:///{database}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(database) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        run_columns = {row[1] for row in connection.execute("PRAGMA table_info(diagnosis_run)")}
    assert {"diagnosis_session", "diagnosis_run", "tool_invocation", "orchestration_event",
            "executor_attempt"} <= tables
    assert {"request_id", "request_id_released"} <= run_columns
    assert {"gateway_instance", "heartbeat_at"} <= run_columns
    assert revision == "0006_principal_runs"

    # Running it again is a no-op, not an error.
    assert run_cli("--url", f"sqlite:///{database}", cwd=tmp_path).returncode == 0


def test_url_from_environment(tmp_path):
    database = tmp_path / "env.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTEST_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["ATTEST_DATABASE_URL"] = f"sqlite:///{database}"
    result = subprocess.run(
        [sys.executable, "-m", "shared.db.migrate"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert database.exists()
