"""Secrets out of everything Attest keeps: a `Redactor` replaces credentials in text by MARKER,
keeping the text around them.

    postgres://app:s3cr3t@db:5432/orders   ->  postgres://app:[REDACTED]@db:5432/orders
    Authorization: Bearer eyJhbGciOi…      ->  Authorization: Bearer [REDACTED]
    {"password": "hunter2"}                ->  {"password": "[REDACTED]"}

The built-in detectors (BUILTIN_DETECTORS) know credentials by where they stand (a URL's
userinfo, a header, a `key=value` / `key: value` / JSON pair under a secret-like key) and by shape
(bearer tokens, JWTs, AWS access key ids, PEM private keys, GitHub / Slack / Stripe / Google
tokens). Operators add their own regular expressions (the whole match is a secret, or only its
first group when it has one).

Properties every caller relies on:
- deterministic, and idempotent: redacting redacted text changes nothing (MARKER is never a
  secret's continuation, and a detector that meets MARKER as a value puts MARKER back);
- bounded work per position, so linear time: every built-in pattern starts with a fixed word and
  repeats only single character classes, each at most MAX_RUN times, never a repetition inside
  another, so no line can make a pattern backtrack without bound (tests/unit/test_redaction.py
  checks the patterns' structure); a secret longer than MAX_RUN is redacted to its end by one
  forward scan of its characters;
- ordinary log text is kept: a secret key ends where its word ends (`token_bucket`, `max_tokens`,
  `password_reset`, `api_key_id` are not secret keys), and in the `key: value` form (or after
  `Bearer`) a value that is one lowercase word (`token: expired`, `password: required`,
  `Bearer authentication`) is prose; `key=value` is always a secret.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MARKER = "[REDACTED]"
# The longest run any built-in pattern matches in one repetition; a secret beyond it is followed
# to its end by the detector's `continuation` scan.
MAX_RUN = 4096
_PROSE_WORD = re.compile(r"[a-z]{1,64}")


class RedactionPatternError(ValueError):
    """A configured pattern is not a usable regular expression (said in one line, at start-up)."""


@dataclass(frozen=True)
class Detector:
    """One kind of secret. The secret is the group `secret` (or `quoted`) when the pattern has
    it, else the whole match; `continuation` extends a secret cut at MAX_RUN to its real end; with
    `prose_guard`, an unquoted value that is one lowercase word after a colon is left alone."""

    name: str
    pattern: re.Pattern[str]
    continuation: re.Pattern[str] | None = None
    prose_guard: bool = False
    # A cheap test run before the pattern: every match contains one of `folded` (looked for in the
    # text lower-cased: the literals the pattern matches case-insensitively) or of `exact` (as
    # written). Both empty (an operator's pattern): the pattern always runs.
    folded: tuple[str, ...] = ()
    exact: tuple[str, ...] = ()

    def may_match(self, text: str, folded_text: str | None) -> bool:
        """False only when no match can exist in `text` (`folded_text`: see `_folded`)."""
        if not self.folded and not self.exact:
            return True
        if any(literal in text for literal in self.exact):
            return True
        if folded_text is None:
            return bool(self.folded)
        return any(literal in folded_text for literal in self.folded)


def _detector(name: str, pattern: str, continuation: str | None = None, *, prose_guard: bool = False,
              folded: tuple[str, ...] = (), exact: tuple[str, ...] = ()) -> Detector:
    return Detector(name, re.compile(pattern), re.compile(continuation) if continuation else None, prose_guard,
                    folded, exact)


# Characters `re.IGNORECASE` matches to an ASCII letter that `str.lower()` does not turn into that
# letter alone (İ, ı ~ i; ſ ~ s). A text holding one is not prefiltered on its folded literals.
_FOLD_EXCEPTIONS = re.compile("[\u0130\u0131\u017f]")


def _literal_scan(literals: Iterable[str]) -> re.Pattern[str]:
    """A pattern that finds any of `literals` (one that never matches when there are none)."""
    alternatives = sorted(set(literals), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, alternatives)) if alternatives else r"(?!)")


def _folded(text: str) -> str | None:
    """`text` lower-cased, where a case-insensitive ASCII literal matches exactly where the
    lower-cased literal occurs; None when `text` holds a character for which that is not so."""
    if not text.isascii() and _FOLD_EXCEPTIONS.search(text) is not None:
        return None
    return text.lower()


_KEY_VALUE_CHARS = r"[^\s\"'\\&,;]"
_QUOTED_CHARS = r"[^\"'\\\r\n]"
_TOKEN_CHARS = r"[A-Za-z0-9._~+/-]"
_B64URL = r"[A-Za-z0-9_-]"
# Where a bearer token's `=` padding may end: at a space, a quote, a delimiter or the text's end.
_TOKEN_END = r"""(?=[\s"',;)}\]]|$)"""
# Keys whose value is a secret, matched whole (case-insensitive): `db_password`, `client_secret`,
# `AWS_SECRET_ACCESS_KEY`, `accessToken` end in one of them.
SECRET_KEYS = (
    r"passw(?:or)?d|pwd|passphrase|secret(?:[_-]?access)?(?:[_-]?key)?|"
    r"(?:access|private|api)[_-]?key|apikey|token"
)
_SECRET_KEY_NAME = re.compile(rf"(?i:[A-Za-z0-9_-]{{0,64}}(?:{SECRET_KEYS}))")
_HEADERS = r"proxy-authorization|authorization|x-api-key|api-key|x-auth-token|x-access-token|x-amz-security-token"
_AUTH_SCHEMES = r"bearer|basic|digest|token|negotiate|apikey"
# The separator of a header or key and its value: `k=v`, `k: v`, `"k": "v"`, `\"k\":\"v\"`.
_SEPARATOR = r"(?P<sep>\\?[\"']?[ \t]{0,8}[:=][ \t]{0,8})"

BUILTIN_DETECTORS: tuple[Detector, ...] = (
    _detector(
        # -----BEGIN RSA PRIVATE KEY----- … -----END RSA PRIVATE KEY----- (a block cut before its
        # END line is redacted to where it was cut).
        "pem_private_key",
        rf"-----BEGIN [A-Z0-9 ]{{0,40}}PRIVATE KEY-----(?P<secret>[^-]{{1,{MAX_RUN}}})",
        r"[^-]*",
        exact=("-----BEGIN ",),
    ),
    _detector(
        # scheme://user:password@host — and the same cut by a log line's `…` before its `@`.
        "url_credentials",
        r"://[^\s/:@\"']{0,256}:(?P<secret>[^\s/@\"'…]{1,256})(?=@|…)",
        exact=("://",),
    ),
    _detector(
        "cookie_header",
        rf"(?i:\b(?:set-)?cookie){_SEPARATOR}(?:\\?[\"'])?(?P<secret>{_QUOTED_CHARS}{{1,{MAX_RUN}}})",
        rf"{_QUOTED_CHARS}*",
        prose_guard=True,
        folded=("cookie",),
    ),
    _detector(
        "auth_header",
        rf"(?i:\b(?:{_HEADERS})){_SEPARATOR}(?:\\?[\"'])?(?:(?i:{_AUTH_SCHEMES})[ \t]{{1,8}})?"
        rf"(?P<secret>{_KEY_VALUE_CHARS}{{1,{MAX_RUN}}})",
        rf"{_KEY_VALUE_CHARS}*",
        prose_guard=True,
        folded=("authorization", "api-key", "-token"),  # every one of _HEADERS holds one
    ),
    _detector(
        "bearer_token",
        # RFC 6750's b64token: `=` only as its padding (`Bearer expires_in=3600` is a field).
        rf"(?i:\bbearer)[ \t]{{1,8}}(?P<secret>{_TOKEN_CHARS}{{8,{MAX_RUN}}}+(?:={{1,2}}{_TOKEN_END}|(?!=)))",
        rf"{_TOKEN_CHARS}*",
        prose_guard=True,
        folded=("bearer",),
    ),
    _detector(
        # password=…, "api_key": "…", token: … — the key whole, the value up to its end.
        "secret_key_value",
        rf"(?i:{SECRET_KEYS})(?![A-Za-z0-9_-]){_SEPARATOR}"
        rf"(?:(?P<quote>\\?[\"'])(?P<quoted>{_QUOTED_CHARS}{{1,{MAX_RUN}}})|(?P<secret>{_KEY_VALUE_CHARS}{{1,{MAX_RUN}}}))",
        rf"{_KEY_VALUE_CHARS}*",
        prose_guard=True,
        folded=("passw", "pwd", "passphrase", "secret", "key", "token"),  # every one of SECRET_KEYS holds one
    ),
    _detector("jwt", rf"\beyJ{_B64URL}{{4,{MAX_RUN}}}\.{_B64URL}{{4,{MAX_RUN}}}(?:\.{_B64URL}{{0,{MAX_RUN}}})?",
              r"[A-Za-z0-9_.-]*", exact=("eyJ",)),
    _detector("aws_access_key_id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", exact=("AKIA", "ASIA")),
    _detector("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{20,255})",
              r"[A-Za-z0-9_]*", exact=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    _detector("slack_token", r"\bxox[abposre]-[A-Za-z0-9-]{10,255}", r"[A-Za-z0-9-]*", exact=("xox",)),
    _detector("stripe_secret_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,255}", r"[A-Za-z0-9]*",
              exact=("k_live_", "k_test_")),
    _detector("google_api_key", r"\bAIza[A-Za-z0-9_-]{35}", exact=("AIza",)),
)


def compile_patterns(patterns: Sequence[str], setting: str = "ATTEST_REDACTION_PATTERNS") -> tuple[Detector, ...]:
    """Operator patterns as detectors; RedactionPatternError names the first that does not compile
    (its position in the list, and why; never its text, which may quote a secret's shape)."""
    detectors = []
    for number, text in enumerate(patterns, start=1):
        if not text:
            raise RedactionPatternError(f"{setting}: pattern {number} is empty")
        try:
            pattern = re.compile(text)
        except re.error as exc:
            raise RedactionPatternError(
                f"{setting}: pattern {number} is not a valid regular expression ({exc})"
            ) from None
        detectors.append(Detector(f"configured_{number}", pattern))
    return tuple(detectors)


class Redactor:
    """Replaces every secret its detectors find by MARKER (see the module docstring)."""

    def __init__(self, extra_patterns: Sequence[str] = (), *, builtins: bool = True) -> None:
        self.detectors: tuple[Detector, ...] = (BUILTIN_DETECTORS if builtins else ()) + compile_patterns(extra_patterns)
        # Texts without any detector's literal (most log lines) skip every prefiltered detector
        # after two scans; the rest ask each detector.
        self._unfiltered = tuple(detector for detector in self.detectors if not detector.folded and not detector.exact)
        self._folded_hint = _literal_scan(literal for detector in self.detectors for literal in detector.folded)
        self._exact_hint = _literal_scan(literal for detector in self.detectors for literal in detector.exact)

    def redact(self, text: str) -> str:
        if not text:
            return text
        # The prefilter reads the text as given: redacting only cuts text out and puts MARKER in
        # its place, and no literal holds MARKER's brackets or sits inside it, so a literal absent
        # before a detector ran is absent after it.
        folded_text = _folded(text)
        if folded_text is not None and self._exact_hint.search(text) is None \
                and self._folded_hint.search(folded_text) is None:
            candidates = self._unfiltered
        else:
            candidates = tuple(detector for detector in self.detectors if detector.may_match(text, folded_text))
        for detector in candidates:
            text = _apply(detector, text)
        return text

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string redacted; a value under a secret-like key (a
        request's `{"password": "…"}`) is MARKER."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {key: self._field(key, item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.redact_value(item) for item in value]
        return value

    def redact_json(self, text: str) -> str:
        """A JSON document with every string in it redacted (written back compactly, as
        `shared.core.tool_results.dump_result` writes); text that is not JSON is redacted as text.
        Returns `text` itself when nothing in it is a secret."""
        if self._holds_no_literal(text):
            return text
        try:
            document = json.loads(text)
        except ValueError:
            return self.redact(text)
        redacted = self.redact_value(document)
        if redacted == document:
            return text
        return json.dumps(redacted, ensure_ascii=False, separators=(",", ":"))

    def _holds_no_literal(self, text: str) -> bool:
        """True when no string decoded from `text` (as JSON or as itself) can hold a secret: every
        detector is prefiltered and `text` holds none of their literals. Without `\\u` or `\\/`
        escapes a decoded string is a verbatim piece of the text (no literal holds a quote, a
        backslash or a control character), and a secret-like key holds a folded literal."""
        if self._unfiltered or "\\u" in text or "\\/" in text:
            return False
        folded_text = _folded(text)
        return folded_text is not None and self._exact_hint.search(text) is None \
            and self._folded_hint.search(folded_text) is None

    def _field(self, key: Any, value: Any) -> Any:
        if isinstance(key, str) and isinstance(value, str) and value and _SECRET_KEY_NAME.fullmatch(key):
            return MARKER
        return self.redact_value(value)


def _secret_span(detector: Detector, match: re.Match[str]) -> tuple[int, int] | None:
    """Where the secret of `match` is, or None when the match is prose (see `prose_guard`)."""
    groups = match.re.groupindex
    if "quoted" in groups and match.group("quoted") is not None:
        return match.span("quoted")
    if "secret" in groups:
        if match.group("secret") is None:
            return None
        start, end = match.span("secret")
        if detector.prose_guard and _is_prose(match):
            return None
        return start, end
    if match.re.groups:
        return match.span(1) if match.group(1) is not None else None
    return match.span()


def _is_prose(match: re.Match[str]) -> bool:
    """A value that is one lowercase word after a colon (or after `Bearer`): `token: expired`."""
    separator = match.group("sep") if "sep" in match.re.groupindex else ":"
    return ":" in (separator or "") and _PROSE_WORD.fullmatch(match.group("secret")) is not None


def _apply(detector: Detector, text: str) -> str:
    """`text` with each secret `detector` finds replaced by MARKER, in one left-to-right pass."""
    pieces: list[str] = []
    copied = 0  # text[:copied] is already in `pieces`
    position = 0  # where the next search starts
    while (match := detector.pattern.search(text, position)) is not None:
        span = _secret_span(detector, match)
        if span is None or span[0] == span[1]:
            position = match.end() if match.end() > match.start() else match.start() + 1
            if position > len(text):
                break
            continue
        start, end = span
        if detector.continuation is not None and end - start >= MAX_RUN:
            continued = detector.continuation.match(text, end)
            end = continued.end() if continued is not None else end
        pieces.append(text[copied:start])
        pieces.append(MARKER)
        copied = end
        position = max(end, match.end())
    pieces.append(text[copied:])
    return "".join(pieces)
