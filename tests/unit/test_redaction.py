"""The redactor: each detector finds its secret and keeps the text around it,
ordinary log text is never touched, redacting twice changes nothing, and no pattern can take more
than a bounded number of steps per character (checked on the patterns' structure, then run on
long adversarial lines)."""

from __future__ import annotations

import dataclasses
import json
import re
import re._parser as sre_parse  # the stdlib's own pattern parser: the structure check below
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.db.migrate import upgrade
from shared.redaction import (
    BUILTIN_DETECTORS,
    MARKER,
    MAX_RUN,
    RedactionPatternError,
    Redactor,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
REDACTOR = Redactor()
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"

# (line as logged, line as stored): the secret replaced, everything else kept.
REDACTED = [
    # credentials in URLs
    ("connect to postgres://app:s3cr3t-Pw@orders-db:5432/orders failed",
     "connect to postgres://app:[REDACTED]@orders-db:5432/orders failed"),
    ("redis://:pw0rd@cache-1:6379/0 unreachable", "redis://:[REDACTED]@cache-1:6379/0 unreachable"),
    ("mongodb+srv://svc:hunter2@cluster0.example.net/db", "mongodb+srv://svc:[REDACTED]@cluster0.example.net/db"),
    ("amqp://guest:guest@rabbit:5672 closed", "amqp://guest:[REDACTED]@rabbit:5672 closed"),
    # a log line cut (…) before the URL's `@`: what is left of the password goes too
    ("Caused by: jdbc postgres://app:s3cr3t-Pw…", "Caused by: jdbc postgres://app:[REDACTED]…"),
    # headers
    (f"GET /v1/pay Authorization: Bearer {JWT} 200", "GET /v1/pay Authorization: Bearer [REDACTED] 200"),
    ("proxy-authorization: Basic dXNlcjpwYXNzd29yZA==", "proxy-authorization: Basic [REDACTED]"),
    ("headers={'Authorization': 'Token 9a8b7c6d5e4f', 'Accept': '*/*'}",
     "headers={'Authorization': 'Token [REDACTED]', 'Accept': '*/*'}"),
    ("Cookie: session=abc123; csrftoken=xyz789", "Cookie: [REDACTED]"),
    ('{"set-cookie": "sid=Qm9iOjE; Path=/; HttpOnly", "status": 302}', '{"set-cookie": "[REDACTED]", "status": 302}'),
    ("X-Api-Key: 1f2e3d4c5b6a7980 from 10.0.0.7", "X-Api-Key: [REDACTED] from 10.0.0.7"),
    ("x-auth-token=AbC123xYz", "x-auth-token=[REDACTED]"),
    # key=value, key: value, JSON, escaped JSON; keys in any case, and the usual prefixes
    ("jdbc:postgresql://db:5432/orders?user=app&password=hunter2&ssl=true",
     "jdbc:postgresql://db:5432/orders?user=app&password=[REDACTED]&ssl=true"),
    ("login user=bob PASSWORD=Tr0ub4dor&3", "login user=bob PASSWORD=[REDACTED]&3"),
    ("db_passwd=letmein pwd=xyz", "db_passwd=[REDACTED] pwd=[REDACTED]"),
    ("secret: Swordfish1", "secret: [REDACTED]"),
    ('config {"client_secret": "correct horse battery", "client_id": "web"}',
     'config {"client_secret": "[REDACTED]", "client_id": "web"}'),
    ("{'api_key': 'k-123', 'region': 'eu-west-1'}", "{'api_key': '[REDACTED]', 'region': 'eu-west-1'}"),
    ('payload "{\\"apiKey\\":\\"abc123XYZ\\"}"', 'payload "{\\"apiKey\\":\\"[REDACTED]\\"}"'),
    ("access_key = AbCdEf0123 token=t0k3n", "access_key = [REDACTED] token=[REDACTED]"),
    ("refresh with accessToken=zzz999&page=2", "refresh with accessToken=[REDACTED]&page=2"),
    # shapes
    (f"bearer {JWT}", "bearer [REDACTED]"),
    (f"id_token {JWT} issued", "id_token [REDACTED] issued"),
    ("assumed role key AKIAIOSFODNN7EXAMPLE", "assumed role key [REDACTED]"),
    ("session ASIAY34FZKBOKMUTVV7A expires", "session [REDACTED] expires"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY region=us-east-1",
     "aws_secret_access_key=[REDACTED] region=us-east-1"),
    ('"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"', '"SecretAccessKey": "[REDACTED]"'),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nq1w2e3r4==\n-----END RSA PRIVATE KEY-----\nloaded",
     "-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----\nloaded"),
    ("key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC…",
     "key: -----BEGIN PRIVATE KEY-----[REDACTED]"),
    ("push with ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 ok", "push with [REDACTED] ok"),
    ("GITHUB_TOKEN github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "GITHUB_TOKEN [REDACTED]"),
    ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp posted", "slack [REDACTED] posted"),
    ("charge via sk_live_51Hx0AbCdEfGhIjKlMnOpQr failed", "charge via [REDACTED] failed"),
    ("maps AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI quota", "maps [REDACTED] quota"),
    # one detector's output is never another's input
    ("Bearer aws_secret_access_key=wJalrXUtnFEMI/K7MDENG region=us-east-1",
     "Bearer aws_secret_access_key=[REDACTED] region=us-east-1"),
    ('{"auth": "Bearer abc123def456=="}', '{"auth": "Bearer [REDACTED]"}'),
]

# Realistic lines without any secret: stored exactly as logged.
ORDINARY = [
    "2026-12-01T10:00:00Z ERROR payment-service host=10.0.4.12 request_id=7f9c2c1e-8d1a-4c7e-9a33-1b2c3d4e5f60 "
    "POST /v1/charge 503 in 2301ms",
    "token bucket refilled: 40 tokens, max_tokens=1024, token_count=12",
    "password reset page served to user 4411 in 35ms",
    "invalid token: expired for client web-frontend",
    "authorization: denied for role viewer",
    "Bearer authentication failed: signature mismatch",
    "secret rotation scheduled at 2026-12-02T03:00:00Z",
    "api_key_id=12 token_type=Bearer expires_in=3600",
    "connect to https://orders-db.internal:5432/orders timed out after 5.0s",
    "GET https://api.example.com/v2/items?page=3&limit=50 -> 200 (12 ms)",
    "upstream 10.12.0.5:8080 returned 502; retry 2/3; trace_id=4bf92f3577b34da6a3ce929d0e0e4736",
    "java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available, request timed out after 30000ms.",
    "FATAL:  password authentication failed for user \"app\"",
    "cookie consent banner shown; session length 12m",
    "GC pause 120ms (G1 Evacuation Pause) heap 3.1G->1.2G(8G)",
    "deployed checkout-service v2.3.1 (commit 9fceb02) by alice: raise pool size to 50",
    "Traceback (most recent call last):\n  File \"app.py\", line 12, in <module>\nKeyError: 'token'",
    "user.email=bob@example.com logged in from 192.168.1.20",
    "kafka consumer group orders-v2 lag=1520 partition=3 offset=99812",
    "disk /var/lib/postgresql 91% full (inode 45%)",
    "eyJ is the start of a base64 JSON object",
    "AKIA-style ids are rotated by the platform team",
    '{"password": null, "user": "bob"}',
]


@pytest.mark.parametrize(("logged", "stored"), REDACTED)
def test_each_detector_redacts_its_secret_and_keeps_the_context(logged: str, stored: str) -> None:
    assert REDACTOR.redact(logged) == stored
    assert REDACTOR.redact(stored) == stored  # idempotent


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_log_text_is_kept_as_it_is(line: str) -> None:
    assert REDACTOR.redact(line) == line


def test_a_secret_longer_than_one_run_is_redacted_to_its_end() -> None:
    long_secret = "A1b2" * (MAX_RUN // 2)
    for line in (f"password={long_secret} next", f"Authorization: Bearer {long_secret} next",
                 "-----BEGIN PRIVATE KEY-----\n" + "QUJD\n" * MAX_RUN + "-----END PRIVATE KEY----- next"):
        redacted = REDACTOR.redact(line)
        assert "A1b2" not in redacted and "QUJD" not in redacted
        assert redacted.endswith(" next") and MARKER in redacted
        assert REDACTOR.redact(redacted) == redacted


_FRAGMENTS = [line for pair in REDACTED for line in pair] + ORDINARY + [
    "password", "=", ": ", '"', "'", "\\", "://", "@", ":", "Bearer ", "…", "\n", MARKER, "&", ";", " ", "eyJ", ".",
    "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "Cookie", "token", "AKIA", "x",
    "password=", "://u:", "Cookie: ", "token: ", "ghp_", "eyJhbGciOi", "==", "[", "]", "{", "}", ",", "_", "0", "A",
]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=20).map("".join))
def test_redacting_redacted_text_changes_nothing(text: str) -> None:
    once = REDACTOR.redact(text)
    assert REDACTOR.redact(once) == once
    assert REDACTOR.redact(text) == once  # deterministic


# --- the literal prefilter: it only ever skips a detector that could not have matched ----------

_UNFILTERED = Redactor()
_UNFILTERED.detectors = tuple(dataclasses.replace(detector, folded=(), exact=()) for detector in _UNFILTERED.detectors)
_UNFILTERED._unfiltered = _UNFILTERED.detectors
# Case-insensitive matching meets these where lower-casing does not (İ, ı ~ i; ſ ~ s; K ~ k).
_FOLDING = ["\u0130", "\u0131", "\u017f", "\u212a", "PA\u017f\u017fWORD=", "Author\u0131zation: ", "to\u212aen=",
            "AUTHORIZATION: Basic ", "X-API-KEY=", "Set-Cookie: ", "BEARER ", "Passphrase: ", "订单支付失败 ", "ké"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS + _FOLDING), max_size=20).map("".join))
def test_the_prefilter_never_changes_what_is_redacted(text: str) -> None:
    assert REDACTOR.redact(text) == _UNFILTERED.redact(text)


@settings(max_examples=1000, deadline=None)
@given(st.dictionaries(st.lists(st.sampled_from(_FRAGMENTS + _FOLDING), max_size=4).map("".join),
                       st.lists(st.lists(st.sampled_from(_FRAGMENTS + _FOLDING), max_size=8).map("".join), max_size=3),
                       max_size=4),
       st.booleans())
def test_the_prefilter_never_changes_a_redacted_json_document(value, ascii_only: bool) -> None:
    # ensure_ascii writes non-ASCII letters as \\u escapes: a literal may only appear once decoded.
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert REDACTOR.redact_json(text) == _UNFILTERED.redact_json(text)


@pytest.mark.parametrize("text", ['{"url": "redis:\\/\\/:pw0rd@cache-1:6379"}', '{"a": ["PA\\u017f\\u017fWORD=x1"]}',
                                  '{"\\u0074oken": "abc123"}', '{"m": "Authorization: Bearer abcdefgh\\u0031234"}'])
def test_a_secret_spelled_with_json_escapes_is_redacted(text: str) -> None:
    assert MARKER in REDACTOR.redact_json(text)
    assert REDACTOR.redact_json(text) == _UNFILTERED.redact_json(text)


@pytest.mark.parametrize("line", ["PA\u017f\u017fWORD=hunter2", "Author\u0131zation: Bearer abcdefgh12345",
                                  "to\u212aen=abc123 订单", "x-amz-security-token=Zm9vYmFy"])
def test_secrets_spelled_with_case_folding_letters_are_still_redacted(line: str) -> None:
    assert MARKER in REDACTOR.redact(line)
    assert REDACTOR.redact(line) == _UNFILTERED.redact(line)


def test_no_prefilter_literal_can_be_made_by_redacting() -> None:
    # Redacting cuts a secret out and puts MARKER in: a literal absent before must stay absent.
    literals = [literal for detector in BUILTIN_DETECTORS for literal in detector.folded + detector.exact]
    assert literals and all(detector.folded or detector.exact for detector in BUILTIN_DETECTORS)
    for literal in literals:
        assert literal.lower() not in MARKER.lower() and not set(literal) & set(MARKER[0] + MARKER[-1])


# --- bounded work per character -------------------------------------------------------------------

_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT}


def _repeats(items, inside_repeat: bool = False):
    """(min, max, nested) of every repetition in a parsed pattern; nested: inside a repetition
    that may run more than once."""
    for op, arg in items:
        if op in _REPEATS:
            low, high, body = arg
            yield low, high, inside_repeat
            yield from _repeats(body, inside_repeat or high > 1)
        elif op is sre_parse.SUBPATTERN:
            yield from _repeats(arg[-1], inside_repeat)
        elif op is sre_parse.BRANCH:
            for branch in arg[1]:
                yield from _repeats(branch, inside_repeat)
        elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT, sre_parse.ATOMIC_GROUP):
            yield from _repeats(arg[-1] if op is not sre_parse.ATOMIC_GROUP else arg, inside_repeat)


@pytest.mark.parametrize("detector", BUILTIN_DETECTORS, ids=lambda detector: detector.name)
def test_no_builtin_pattern_can_backtrack_without_bound(detector) -> None:
    """Catastrophic backtracking needs an unbounded repetition or a repetition inside another one:
    the built-in patterns have neither, so each position costs at most a bounded number of steps.
    The continuation that follows a long secret is one character class, matched once from where
    the secret was cut."""
    repeats = list(_repeats(sre_parse.parse(detector.pattern.pattern)))
    assert repeats, "every detector repeats something"
    for _low, high, nested in repeats:
        assert high <= MAX_RUN, f"{detector.name}: an unbounded repetition"
        assert not nested, f"{detector.name}: a repetition inside a repetition"
    if detector.continuation is not None:
        parsed = list(sre_parse.parse(detector.continuation.pattern))
        assert len(parsed) == 1 and parsed[0][0] in _REPEATS
        assert [op for op, _ in parsed[0][1][2]] in ([sre_parse.IN], [sre_parse.NOT_LITERAL])


ADVERSARIAL = [
    "://" + "a" * 200_000,
    "://a:" + "b" * 200_000,
    "password" * 30_000,
    "password=" * 30_000,
    '"password": "' * 20_000,
    "Authorization: " * 20_000,
    "Bearer " * 30_000,
    "eyJ" + "a" * 200_000,
    "eyJaaaa." * 30_000,
    "-----BEGIN PRIVATE KEY-----" * 8_000,
    "-----BEGIN " + "A " * 100_000,
    "AKIA" * 50_000,
    "ghp_" + "a" * 200_000 + "!",
    "x" * 200_000 + "@",
]


@pytest.mark.parametrize("line", ADVERSARIAL, ids=lambda line: f"{line[:16]!r}x{len(line)}")
def test_long_adversarial_lines_are_redacted_in_one_pass(line: str) -> None:
    redacted = REDACTOR.redact(line)
    assert REDACTOR.redact(redacted) == redacted
    assert len(redacted) <= len(line) + len(MARKER) * (len(line) // 8 + 1)


# --- configuration --------------------------------------------------------------------------------


def test_configured_patterns_redact_the_whole_match_or_their_first_group() -> None:
    redactor = Redactor([r"corp-[0-9a-f]{16}", r"tenant_secret\((\w+)\)"])
    assert redactor.redact("key corp-0123456789abcdef used") == "key [REDACTED] used"
    assert redactor.redact("tenant_secret(abc123) loaded") == "tenant_secret([REDACTED]) loaded"
    assert redactor.redact("postgres://a:b@h") == "postgres://a:[REDACTED]@h"  # the built-ins still run


def test_built_ins_can_be_switched_off() -> None:
    redactor = Redactor([r"corp-[0-9a-f]{16}"], builtins=False)
    assert redactor.redact("password=hunter2 corp-0123456789abcdef") == "password=hunter2 [REDACTED]"


@pytest.mark.parametrize("patterns", [["("], ["ok", "[a-"], [""]])
def test_a_pattern_that_does_not_compile_is_refused_in_one_line(patterns) -> None:
    with pytest.raises(RedactionPatternError) as caught:
        Redactor(patterns)
    message = str(caught.value)
    assert message.startswith("ATTEST_REDACTION_PATTERNS: pattern ")
    assert f"pattern {len(patterns)}" in message and "\n" not in message


def test_json_results_are_redacted_field_by_field_and_kept_byte_for_byte_when_clean() -> None:
    clean = json.dumps({"hits": [{"message": "GET /health 200"}], "total": 1}, separators=(",", ":"))
    assert REDACTOR.redact_json(clean) is clean
    dirty = json.dumps({"hits": [{"message": 'login {"password": "x1"}'}], "n": 1.5}, separators=(",", ":"))
    assert json.loads(REDACTOR.redact_json(dirty)) == {"hits": [{"message": 'login {"password": "[REDACTED]"}'}], "n": 1.5}
    assert REDACTOR.redact_json("not json password=x") == "not json password=[REDACTED]"


def test_a_request_value_under_a_secret_key_is_redacted_whatever_its_shape() -> None:
    request = {"tool": "query_logs", "service": "payment", "db_password": "plain", "limit": 5, "max_tokens": "12",
               "contains": "Authorization: Bearer abcdefgh12345"}
    assert REDACTOR.redact_value(request) == {
        "tool": "query_logs", "service": "payment", "db_password": MARKER, "limit": 5, "max_tokens": "12",
        "contains": "Authorization: Bearer [REDACTED]",
    }


def test_the_executor_refuses_to_start_with_a_pattern_that_does_not_compile(tmp_path) -> None:
    database_url, estate_url = f"sqlite:///{tmp_path / 'attest.db'}", f"sqlite:///{tmp_path / 'estate.db'}"
    upgrade(database_url)
    env = {
        "PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'gen'}",
        "ATTEST_DATABASE_URL": database_url, "ATTEST_ESTATE_DATABASE_URL": estate_url, "ATTEST_EXECUTOR_PORT": "0",
        "ATTEST_INSECURE": "1",  # the pattern is what is under test, not the transport
        "ATTEST_REDACTION_PATTERNS": json.dumps([r"corp-\d+", r"(unclosed"]),
    }
    done = subprocess.run([sys.executable, "-m", "services.executor"], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "READY" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("{")]
    assert lines == [
        "error: executor: ATTEST_REDACTION_PATTERNS: pattern 2 is not a valid regular expression "
        "(missing ), unterminated subpattern at position 0)"
    ]


def test_patterns_are_compiled_once() -> None:
    assert all(isinstance(detector.pattern, re.Pattern) for detector in Redactor(["a+"]).detectors)
