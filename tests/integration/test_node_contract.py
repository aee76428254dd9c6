"""A client nobody here wrote: the Node.js contract test
(`tests/contract/node/contract.test.mjs`, @grpc/grpc-js + @grpc/proto-loader loading `protos/`)
run against the six services' real processes. `make install` puts its npm packages in place
(`npm ci`); `.ci/run` installs Node.js where the machine has none."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from gateway.launcher import REPO_ROOT
from tests.integration.conftest import TEST_TOKEN

pytestmark = pytest.mark.integration

CONTRACT = REPO_ROOT / "tests" / "contract" / "node"


def test_the_node_client_contract_holds(cluster) -> None:
    node = shutil.which("node")
    assert node, "Node.js is missing: install it (Debian's nodejs) and run `make install`"
    assert (CONTRACT / "node_modules" / "@grpc" / "grpc-js").is_dir(), \
        "the contract test's npm packages are missing: run `make install` (npm ci in tests/contract/node)"
    env = {**os.environ, "ATTEST_GATEWAY": cluster.gateway_addr, "ATTEST_TOKEN": TEST_TOKEN,
           "ATTEST_PROTOS": str(REPO_ROOT / "protos")}
    done = subprocess.run([node, "--test", "--test-reporter=spec", "contract.test.mjs"], cwd=CONTRACT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    declared = (CONTRACT / "contract.test.mjs").read_text(encoding="utf-8").count("\ntest(")
    assert declared >= 6 and f"ℹ pass {declared}\n" in done.stdout, done.stdout[-3000:]
