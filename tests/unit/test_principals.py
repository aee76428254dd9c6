"""Tokens name principals: the token file an operator writes, what the gateway
does with a bad one, and `attest hash-token`, which writes its lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.principals import (
    DEFAULT_PRINCIPAL,
    PrincipalTokens,
    TokenFileError,
    load_principal_tokens,
    token_digest,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
ALICE_TOKEN = "alice-0f3c9a7d2b"
BOB_TOKEN = "bob-8e41d6c0a5"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen"), env.get("PYTHONPATH", "")])
    return env


def hash_token(principal: str, token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "hash-token", principal], input=token,
                          cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=60)


def write_tokens(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_with_two_principals_lets_each_token_in_as_its_own_principal(tmp_path):
    lines = [hash_token("alice", ALICE_TOKEN), hash_token("bob", BOB_TOKEN + "\n")]
    assert all(line.returncode == 0 for line in lines), [line.stderr for line in lines]
    text = "# callers of the staging gateway\n\n" + "".join(line.stdout for line in lines)
    assert ALICE_TOKEN not in text and BOB_TOKEN not in text, "tokens are never stored in clear"
    tokens = PrincipalTokens.from_file(write_tokens(tmp_path / "tokens", text))

    assert tokens.principal_for(ALICE_TOKEN.encode()) == "alice"
    assert tokens.principal_for(BOB_TOKEN.encode()) == "bob"
    assert tokens.principal_for(b"alice-0f3c9a7d2") is None
    assert tokens.principal_for(b"") is None
    assert tokens.principal_for(token_digest(ALICE_TOKEN).encode()) is None, "the digest is not a token"


def test_the_single_token_is_the_default_principal_beside_the_file(tmp_path):
    path = write_tokens(tmp_path / "tokens", f"alice {token_digest(ALICE_TOKEN)}  # on-call bot\n")
    tokens = load_principal_tokens("demo-token", str(path))
    assert tokens is not None
    assert tokens.principal_for(b"demo-token") == DEFAULT_PRINCIPAL
    assert tokens.principal_for(ALICE_TOKEN.encode()) == "alice"
    assert load_principal_tokens(None, None) is None, "nothing configured: no authentication"


BAD_FILES = {
    "malformed line": ("alice\n", "line 1: expected 'PRINCIPAL sha256:<64 hex digits>'"),
    "token in clear": (f"alice {ALICE_TOKEN}\n", "line 1: expected"),
    "short digest": ("alice sha256:abc123\n", "line 1: expected"),
    "bad principal name": (f"al ice {token_digest(ALICE_TOKEN)}\n", "line 1: expected"),
    "duplicate principal": (f"alice {token_digest(ALICE_TOKEN)}\n# next\nalice {token_digest(BOB_TOKEN)}\n",
                            "line 3: principal 'alice' is already defined"),
    # The same digest in capitals is the same token.
    "duplicate digest": (f"alice {token_digest(ALICE_TOKEN)}\nbob sha256:{token_digest(ALICE_TOKEN)[7:].upper()}\n",
                         "line 2: the same token is already given to 'alice'"),
    "no principal": ("# nobody yet\n\n", "names no principal"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_token_file_is_refused_naming_the_line_and_the_reason(tmp_path, case):
    text, expected = BAD_FILES[case]
    path = write_tokens(tmp_path / "tokens", text)
    with pytest.raises(TokenFileError) as refused:
        load_principal_tokens(None, str(path))
    assert expected in str(refused.value)
    assert str(path) in str(refused.value)
    assert ALICE_TOKEN not in str(refused.value), "a token pasted by mistake is not echoed"


def test_a_missing_file_and_a_default_defined_twice_are_refused(tmp_path):
    with pytest.raises(TokenFileError, match="cannot be read"):
        load_principal_tokens(None, str(tmp_path / "absent"))
    path = write_tokens(tmp_path / "tokens", f"default {token_digest(ALICE_TOKEN)}\n")
    with pytest.raises(TokenFileError, match="ATTEST_AUTH_TOKEN: principal 'default' is defined twice"):
        load_principal_tokens("demo-token", str(path))


@pytest.mark.parametrize("case", ["missing", "duplicate digest"])
def test_the_gateway_stops_at_start_up_on_a_bad_token_file_in_one_line(tmp_path, case):
    path = tmp_path / "tokens"
    if case == "duplicate digest":
        write_tokens(path, f"alice {token_digest(ALICE_TOKEN)}\nbob {token_digest(ALICE_TOKEN)}\n")
    env = {**_env(), "ATTEST_AUTH_TOKENS_FILE": str(path), "ATTEST_GATEWAY_PORT": "0",
           "ATTEST_DATABASE_URL": f"sqlite:///{tmp_path / 'attest.db'}"}
    result = subprocess.run([sys.executable, "-m", "gateway"], cwd=REPO_ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "READY" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("error: gateway: token file") and str(path) in lines[0]


def test_hash_token_refuses_what_cannot_be_a_token_or_a_name():
    for principal, token, message in [("alice", "", "no token on stdin"),
                                      ("alice", "two words", "printable ASCII characters without spaces"),
                                      ("alice", "one\ntwo\n", "more than one line"),
                                      ("-alice", "tok", "is not a principal name")]:
        result = hash_token(principal, token) if not principal.startswith("-") else subprocess.run(
            [sys.executable, "-m", "gateway.hash_token", "--", principal], input=token, cwd=REPO_ROOT, env=_env(),
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (principal, token, result.stdout)
        assert message in result.stderr and result.stdout == ""
