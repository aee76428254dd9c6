"""`python -m shared.health_probe` against a real server built with `shared.server.build_server`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shared.config import ServiceSettings
from shared.health_probe import check, main, role_from_cmdline
from shared.server import build_server

ROOT = Path(__file__).resolve().parents[2]


def test_probe_reports_serving_then_not_serving_after_shutdown() -> None:
    running = build_server(
        service_name="probe-test",
        settings=ServiceSettings(port=0),
        register=lambda server: None,
        service_names=[],
    )
    addr = f"127.0.0.1:{running.port}"
    try:
        assert check(addr)
        assert main([addr]) == 0
        # The real module, as the Dockerfile's HEALTHCHECK runs it.
        done = subprocess.run(
            [sys.executable, "-m", "shared.health_probe", addr], cwd=ROOT, capture_output=True
        )
        assert done.returncode == 0, done.stderr
        running.health.enter_graceful_shutdown()
        assert not check(addr)
    finally:
        running.server.stop(None).wait()
    assert main([addr]) == 1  # nothing listening any more


def test_role_comes_from_the_module_on_the_command_line() -> None:
    assert role_from_cmdline(["python", "-m", "services.verifier", ""]) == "verifier"
    assert role_from_cmdline(["python", "-m", "gateway"]) == "gateway"
    assert role_from_cmdline(["/bin/sh"]) == "gateway"
