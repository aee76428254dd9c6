"""The domain core (`shared/core/`: contracts, rules, grounding, question reading, rendering) is
free of infrastructure: importing every module of it loads no gRPC, no SQLAlchemy, no TLS and no
telemetry, so the rules can be read, tested and reused without a server, a database or a network."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import shared.core

# (The standard library's ssl is no sign: asyncio loads it. Our TLS is shared.tls.)
INFRASTRUCTURE = ("grpc", "sqlalchemy", "alembic", "opentelemetry", "shared.tls", "shared.telemetry",
                  "shared.db", "shared.server", "shared.interceptors", "shared.transport_security", "attest")


def test_the_core_imports_no_infrastructure():
    modules = sorted(m.name for m in pkgutil.walk_packages(shared.core.__path__, "shared.core."))
    assert "shared.core.grounding.causal_link" in modules, modules  # the walk found the core and its packages
    program = (
        "import json, sys\n"
        f"for name in {modules!r}:\n"
        "    __import__(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {INFRASTRUCTURE!r} "
        f"or any(m == p or m.startswith(p + '.') for p in {INFRASTRUCTURE!r}))))\n"
    )
    root = Path(shared.core.__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=root, check=True)
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == [], f"the core loads infrastructure: {loaded}"
