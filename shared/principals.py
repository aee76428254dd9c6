"""Who is calling: bearer tokens mapped to named principals.

Tokens are never kept in clear: the gateway holds `sha256:<hex>` digests, read from a token file
(`ATTEST_AUTH_TOKENS_FILE`, one `PRINCIPAL sha256:<hex>` per line, `#` comments) and/or derived
from the single `ATTEST_AUTH_TOKEN` (principal `default`). A presented token is hashed and
compared with every digest in constant time. The authenticated principal of the call being
served is in a context variable, set by `shared.interceptors.BearerAuthInterceptor` around the
handler; a worker thread started with `contextvars.copy_context()` sees it too.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import re
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PRINCIPAL = "default"
DIGEST_PREFIX = "sha256:"
# Stored in 64-character columns; printable and free of the separators of the token file.
_PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")
# What gRPC metadata can carry in a header value, without the space that separates the scheme.
_TOKEN = re.compile(r"[\x21-\x7e]+")

_current_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("attest_principal", default=None)


class TokenFileError(ValueError):
    """The token file cannot be used; the message says where and why, never a line's content."""


class TokenError(ValueError):
    """A token or principal name that cannot go into a token file."""


def check_principal_name(name: str) -> str:
    if not _PRINCIPAL_NAME.fullmatch(name):
        raise TokenError(
            f"{name[:70]!r} is not a principal name: 1-64 characters, letters, digits and . _ @ -, "
            "starting with a letter or digit"
        )
    return name


def token_digest(token: str | bytes) -> str:
    """`sha256:<hex>` of the token, the form kept in a token file."""
    raw = token.encode() if isinstance(token, str) else token
    return DIGEST_PREFIX + hashlib.sha256(raw).hexdigest()


def token_file_line(principal: str, token: str) -> str:
    """The token-file line that lets `token` in as `principal`."""
    check_principal_name(principal)
    if not _TOKEN.fullmatch(token):
        raise TokenError("a token is one or more printable ASCII characters without spaces")
    return f"{principal} {token_digest(token)}"


class PrincipalTokens:
    """Digests of the accepted tokens, each naming its principal. Immutable once built."""

    def __init__(self, digests: Mapping[str, str]) -> None:
        """`digests` maps principal → `sha256:<hex>`; a digest shared by two principals is refused."""
        seen: dict[str, str] = {}
        for principal, digest in digests.items():
            check_principal_name(principal)
            match = _DIGEST.fullmatch(digest)
            if match is None:
                raise TokenError(f"the digest of principal {principal!r} is not sha256:<64 hex digits>")
            normalized = DIGEST_PREFIX + match.group(1).lower()
            if normalized in seen:
                raise TokenError(f"principals {seen[normalized]!r} and {principal!r} have the same token")
            seen[normalized] = principal
        self._entries: tuple[tuple[bytes, str], ...] = tuple((d.encode(), p) for d, p in seen.items())

    @classmethod
    def single(cls, token: str, principal: str = DEFAULT_PRINCIPAL) -> PrincipalTokens:
        return cls({principal: token_digest(token)})

    @classmethod
    def from_file(cls, path: str | Path) -> PrincipalTokens:
        return cls(read_token_file(path))

    @property
    def principals(self) -> tuple[str, ...]:
        return tuple(principal for _, principal in self._entries)

    def merged(self, other: PrincipalTokens) -> PrincipalTokens:
        """Both sets of tokens; a principal or token in both is refused."""
        mine = dict((p, d.decode()) for d, p in self._entries)
        for digest, principal in other._entries:
            if principal in mine:
                raise TokenError(f"principal {principal!r} is defined twice")
            mine[principal] = digest.decode()
        return PrincipalTokens(mine)

    def principal_for(self, token: bytes) -> str | None:
        """The principal whose token this is, or None. Every digest is compared, in constant time,
        so the time taken says nothing about which (or whether one) matched."""
        presented = token_digest(token).encode()
        found: str | None = None
        for digest, principal in self._entries:
            if hmac.compare_digest(presented, digest):
                found = principal
        return found


def read_token_file(path: str | Path) -> dict[str, str]:
    """principal → digest from a token file. Raises TokenFileError naming the file and line."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise TokenFileError(f"token file {source}: cannot be read ({reason})") from None
    digests: dict[str, str] = {}
    owner_of_digest: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"token file {source}, line {number}"
        fields = line.split()
        # The line is not echoed: a token pasted in clear by mistake must not reach a log.
        if len(fields) != 2 or not _PRINCIPAL_NAME.fullmatch(fields[0]) or not _DIGEST.fullmatch(fields[1]):
            raise TokenFileError(f"{where}: expected 'PRINCIPAL sha256:<64 hex digits>' "
                                 "(make one with `attest hash-token PRINCIPAL`)")
        principal, digest = fields[0], fields[1].lower()
        if principal in digests:
            raise TokenFileError(f"{where}: principal {principal!r} is already defined")
        if digest in owner_of_digest:
            raise TokenFileError(f"{where}: the same token is already given to {owner_of_digest[digest]!r}")
        digests[principal] = digest
        owner_of_digest[digest] = principal
    if not digests:
        raise TokenFileError(f"token file {source}: names no principal")
    return digests


def load_principal_tokens(token: str | None, tokens_file: str | None) -> PrincipalTokens | None:
    """The gateway's tokens from its settings: the file's principals plus `default` for the single
    token; None when neither is configured (no authentication, local development)."""
    tokens: PrincipalTokens | None = None
    if tokens_file:
        tokens = PrincipalTokens.from_file(tokens_file)
    if token:
        single = PrincipalTokens.single(token)
        try:
            tokens = single if tokens is None else tokens.merged(single)
        except TokenError as exc:
            raise TokenFileError(f"token file {tokens_file} and ATTEST_AUTH_TOKEN: {exc}") from None
    return tokens


def current_principal() -> str | None:
    """The principal of the call being served (None outside an authenticated call)."""
    return _current_principal.get()


def principal_context(principal: str) -> contextvars.Context:
    """A copy of the current context in which `principal` is the caller: run a handler (or each
    step of a streaming handler) in it with `Context.run`. Nothing is set in the caller's own
    context, so nothing has to be reset, whichever thread finishes the call."""
    context = contextvars.copy_context()
    context.run(_current_principal.set, principal)
    return context
