"""A verbatim excerpt of an evidence ref's text that the gatekeeper's own matcher accepts.

The executor chooses (and checks) every excerpt with the matcher the gatekeeper uses
(`shared/core/excerpt_match.py`), so that no citation of ours fails our own check. An excerpt is a
piece of the ref's text, copied as is and then confirmed with `excerpt_supported`; a cut that
the matcher would refuse (inside a number: `12` of `12345ms`, `92.` of `92.5`) is moved back to
a word boundary, and a piece that cannot be confirmed is never returned.

Which piece: the most telling line of the text —
1. an exception line of a multi-line entry (the root cause first: the last line of a Python
   traceback, the last `Caused by:`; see `tools/log_entry.py`);
2. in a single line, the part that carries an exception: the JSON string holding
   `XxxException: …` / `XxxError: …`, or the text from that name on;
3. in a JSON line without one, the value of its message field (`msg`, `message`, `error` …);
4. else the first line, up to a request-scoped id (`trace_id=…` says nothing about the incident);
then the whole text. Each is cut at `max_chars` on a word boundary.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from services.executor.tools.log_entry import ELLIPSIS
from shared.core.exception_lines import entry_lines, exception_line_indexes, exception_offset
from shared.core.excerpt_match import excerpt_length, excerpt_supported

MAX_EXCERPT_CHARS = 160
# Characters of substance (the matcher's measure) an excerpt should have to pin a fact down when
# the text allows it; shorter pieces are passed over for a longer candidate.
MIN_EXCERPT_SUBSTANCE = 8
# Request-scoped ids say nothing about the incident; an excerpt stops before them.
_ID_FIELD = re.compile(r"[\s,;]+(?:trace_?id|span_?id|request_?id|x-request-id)[=:]", re.I)
# One JSON string literal, escapes kept as written.
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_MESSAGE_KEYS = ("msg", "message", "error", "err", "exception", "reason", "detail", "error_message", "event")
# A cut must not leave half a number or a dangling separator at either end.
_NUMBERISH_TAIL = re.compile(r"[\d.,:+\-]+$")
_NUMBERISH_HEAD = re.compile(r"^[\d.,:+\-]+")


def _json_values(line: str) -> Iterator[tuple[str, int, int]]:
    """(key, start, end) of each string value in a JSON-looking line; key "" when unknown."""
    tokens = list(_JSON_STRING.finditer(line))
    for k, token in enumerate(tokens):
        after = line[token.end():token.end() + 8].lstrip()
        if after.startswith(":"):
            continue  # a key
        key = ""
        if k > 0:
            between = line[tokens[k - 1].end():token.start()].strip()
            if between == ":":
                key = tokens[k - 1].group(1).lower()
        yield key, token.start(1), token.end(1)


def _line_spans(line: str) -> Iterator[tuple[int, int]]:
    """Spans of one line, most telling first (rules 2-4 of the module docstring)."""
    offset = exception_offset(line)
    if offset >= 0:
        # The JSON string that holds the exception (`"msg":"Unhandled Exception: …"`), but not
        # across a tool's elision mark: a cut line's strings are not what they seem.
        holder = next(((s, e) for _, s, e in _json_values(line) if s <= offset < e), None)
        begin, end = holder if holder is not None else (offset, len(line))
        yield max(begin, line.rfind(ELLIPSIS, 0, offset) + 1), end
    if "{" in line and '"' in line:
        values = {key: (start, end) for key, start, end in reversed(list(_json_values(line))) if key}
        for key in _MESSAGE_KEYS:
            if key in values:
                yield values[key]
                break
    stop = _ID_FIELD.search(line)
    yield 0, stop.start() if stop else len(line)


def _spans(text: str, start: int) -> Iterator[tuple[int, int]]:
    """Candidate spans of text[start:], most telling first, as offsets into `text`."""
    lines = entry_lines(text[start:])  # a line's dropped `\r` was at its end: offsets hold
    offsets: list[int] = []
    position = start
    for raw in text[start:].split("\n"):
        offsets.append(position)
        position += len(raw) + 1
    for index in exception_line_indexes(lines):
        yield offsets[index], offsets[index] + len(lines[index])
    for index, line in enumerate(lines):
        if line.strip():
            for begin, end in _line_spans(line):
                yield offsets[index] + begin, offsets[index] + end
            break


def _bounded(piece: str, max_chars: int) -> str:
    """The piece cut to max_chars at a word boundary, with no truncation mark or half word at
    its end (a ref cut by its tool ends in `…`)."""
    piece = piece.strip()
    if len(piece) > max_chars:
        cut = max(piece.rfind(" ", 0, max_chars + 1), piece.rfind("\t", 0, max_chars + 1))
        piece = piece[:cut] if cut > max_chars // 2 else piece[:max_chars]
    elif piece.endswith(ELLIPSIS):
        body = piece[: -len(ELLIPSIS)]
        cut = max(body.rfind(" "), body.rfind("\t"))
        piece = body[:cut] if cut > len(body) // 2 else body
    return piece.strip()


def _variants(piece: str) -> Iterator[str]:
    """The piece, then the piece without a number-like fragment at a cut end."""
    yield piece
    trimmed = _NUMBERISH_TAIL.sub("", piece).rstrip()
    if trimmed and trimmed != piece:
        yield trimmed
    both = _NUMBERISH_HEAD.sub("", trimmed or piece).lstrip()
    if both and both not in (piece, trimmed):
        yield both


def is_supported(excerpt: str, text: str) -> bool:
    """The gatekeeper's judgement of one excerpt against one ref text (shared matcher)."""
    return bool(excerpt.strip()) and excerpt_supported(excerpt, text)


def telling_excerpt(text: str, start: int = 0, max_chars: int = MAX_EXCERPT_CHARS) -> str | None:
    """The most telling verbatim piece of text[start:] (see the module docstring), at most
    max_chars long and accepted by the shared matcher against the whole `text`; None when no
    piece of the text can be cited."""
    fallback: str | None = None
    seen: set[str] = set()
    for begin, end in _spans(text, start):
        for candidate in _variants(_bounded(text[begin:end], max_chars)):
            if candidate in seen:
                continue
            seen.add(candidate)
            if not is_supported(candidate, text):
                continue
            if excerpt_length(candidate) >= MIN_EXCERPT_SUBSTANCE:
                return candidate
            fallback = fallback or candidate
    for candidate in (_bounded(text, max_chars), text.strip()):
        if candidate and candidate not in seen and is_supported(candidate, text):
            if excerpt_length(candidate) >= MIN_EXCERPT_SUBSTANCE or fallback is None:
                return candidate
    return fallback


# What precedes a line's message: a timestamp, a level word, `[thread]` tags and a `logger -`
# name (`ERROR [worker-2] c.a.x.Foo - `), or Python logging's `WARNING:a.b.c:`.
_LEVEL_WORD = r"(?:FATAL|CRITICAL|ERROR|WARN(?:ING)?|INFO|DEBUG|TRACE|NOTICE)"
_MESSAGE_PREFIX = re.compile(
    r"^\s*(?:\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s+)?"
    r"(?:" + _LEVEL_WORD + r":[\w.$]+:\s*"
    r"|(?:" + _LEVEL_WORD + r"\s+)?(?:\[[^\]]*\]\s*)*(?:[\w.$]+(?:\.[\w$]+)+\s+-\s+)?)"
)


def decisive_excerpt(text: str, start: int = 0, max_chars: int = MAX_EXCERPT_CHARS) -> str | None:
    """The part of a log line that says what went wrong, for a quote that names a cause: the
    message itself (a JSON line's message field; else the line after its `[thread]` tags and
    logger name) up to a request-scoped id, so that what failed and against what stay in view
    (`调用承运商接口超时 carrier=sf …`, `TLS handshake … failed: x509: certificate has expired`)
    rather than the exception name alone; a multi-line entry's root-cause line first. None when
    no such piece can be cited (then `telling_excerpt`)."""
    lines = entry_lines(text[start:])
    if not lines or not lines[0].strip():
        return None
    if len(lines) > 1 and exception_line_indexes(lines):
        return telling_excerpt(text, start, max_chars)
    line = lines[0]
    begin = _MESSAGE_PREFIX.match(line)
    offset, end = (begin.end() if begin else 0), len(line)
    if "{" in line and '"' in line:
        values = {key: (s, e) for key, s, e in reversed(list(_json_values(line))) if key}
        held = next((values[key] for key in _MESSAGE_KEYS if key in values), None)
        if held is not None:
            offset, end = held
    stop = _ID_FIELD.search(line, offset, end)
    piece = line[offset: stop.start() if stop else end]
    for candidate in _variants(_bounded(piece, max_chars)):
        if excerpt_length(candidate) >= MIN_EXCERPT_SUBSTANCE and is_supported(candidate, text):
            return candidate
    return None



# Where a log line names the other end of a failing call: a URL's host, a field that holds a
# peer (`target=`, `"upstream":"…"` …; not `host=`, which is mostly the line's own instance), or
# `to|on|from|with <dotted.name>` (not `at`: a Java stack frame's `at java.base/…`).
_PEER_FIELD = re.compile(
    r"(?<![A-Za-z0-9_])\"?(?:target|upstream|dependency|endpoint|peer|server|remote|backend|carrier|"
    r"provider|url|uri|dest|destination)\"?\s*[=:]\s*\"?(?:[a-z][a-z0-9+.-]*://)?([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])",
    re.I,
)
_PEER_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])", re.I)
_PEER_PHRASE = re.compile(r"\b(?:to|on|from|with)\s+([a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)+)(?=[:/\s,;)'\"]|$)")
_PEER_RESOLVED = re.compile(r"\b([a-z][a-z0-9.-]*[a-z0-9])/\d{1,3}(?:\.\d{1,3}){3}\b")  # Java's `host/10.0.0.7:5432`
_IP = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


def named_peer(text: str, exclude: tuple[str, ...] = ()) -> str | None:
    """The host or service a log line names as the other end of its call (a URL's host, a
    `target=`/`upstream` field, Java's `host/10.0.0.7`, `… on db-1.example.com`), None when it names none. An IP
    address, a name with capitals (a class: `java.net.Foo`) and the names in `exclude` (the
    line's own service) are no peer."""
    skip = {name.lower() for name in exclude}
    for pattern in (_PEER_URL, _PEER_RESOLVED, _PEER_PHRASE, _PEER_FIELD):
        for match in pattern.finditer(text):
            name = match.group(1).rstrip(".-")
            if (name != name.lower() or _IP.match(name) or name in skip or not any(c.isalpha() for c in name)
                    or not any(c in name for c in ".-")):
                continue
            return name
    return None
