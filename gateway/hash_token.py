"""`attest hash-token PRINCIPAL`: the token-file line for a token read from stdin (offline).

    printf '%s' "$TOKEN" | attest hash-token alice >> tokens.txt

The token is read from stdin, never from the command line (where `ps` and shell history would
show it); only its SHA-256 digest is printed, in the line ATTEST_AUTH_TOKENS_FILE expects.
"""

from __future__ import annotations

import argparse
import sys

from shared.principals import TokenError, token_file_line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="attest hash-token",
        description="Print the ATTEST_AUTH_TOKENS_FILE line for the token on stdin (the token itself is not printed).",
    )
    parser.add_argument("principal", help="the caller's name, as runs will record it")
    args = parser.parse_args(argv)
    lines = sys.stdin.read().splitlines()
    token = lines[0].strip() if len(lines) == 1 else ""
    if len(lines) > 1:
        print("error: stdin holds more than one line; give one token", file=sys.stderr)
        return 2
    if not token:
        print("error: no token on stdin", file=sys.stderr)
        return 2
    try:
        print(token_file_line(args.principal, token))
    except TokenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
