"""`attest verdict` and `attest gatekeeper-check` run code that ships with a service, and the gateway
never imports a service: the CLI runs the tool's module as a child process, and says so in one line
when that service's code is not installed beside it."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gateway import cli

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_an_offline_command_loads_no_service_module_in_the_cli_process(tmp_path):
    path = tmp_path / "input.json"
    path.write_text(json.dumps({"claims": [], "claim_checks": [], "model_verdict": "PASS", "verdict_ceiling": "PASS",
                                "evidence_retry_count": 0}), encoding="utf-8")
    script = ("import sys\n"
              "from gateway.cli import main\n"
              f"code = main(['verdict', {str(path)!r}])\n"
              "sys.stdout.flush()\n"
              "print('loaded:', sorted(m for m in sys.modules if m.split('.')[0] == 'services'))\n"
              "sys.exit(code)\n")
    completed = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    verdict_line, loaded_line = completed.stdout.strip().splitlines()
    assert json.loads(verdict_line)["next"] == "COMPOSER"  # the child's stdout is ours
    assert loaded_line == "loaded: []"


def test_a_command_whose_service_is_not_installed_fails_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(cli.OFFLINE_COMMANDS, "verdict", ("services.absent_role.verdict_cli", "absent"))
    assert cli.main(["verdict", "input.json"]) == 127
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "error: attest verdict needs services.absent_role.verdict_cli, which is not installed with this gateway"]


@pytest.mark.parametrize("command", sorted(cli.OFFLINE_COMMANDS))
def test_each_offline_command_is_also_a_console_script_of_its_own(command):
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts[f"attest-{command}"] == f"{cli.OFFLINE_COMMANDS[command][0]}:main"
