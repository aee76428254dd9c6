"""Which words of a question name services.

A service mention is an identifier shaped like a service name (lower-case ASCII words joined by
'-', '_' or '.'), minus what the text plainly uses as something else:

- words of Attest's own protocol (tool names, contract and Draft field names): a question that
  contains them quotes, or injects, our protocol;
- file names, version numbers and common hyphenated English words;
- snake_case identifiers that end like a metric (`_percent`, `_total` …) or like a field or
  setting (`_version`, `_id`, `_key`, `_prompt` …), and snake_case identifiers the text uses as
  code or data: a quoted key (`"x":`), an assignment (`x=`), a call (`f(`), or a name the text
  calls a table, column, field, parameter or variable (`ledger_entries 表`, `DROP TABLE x`);
- a snake_case identifier a service just named owns (`checkout-api 的 queue_depth`, `它的 queue_depth`):
  that service's series.

The embedded planner plans for these names, the model planner accepts only services the question
mentions, and the executor resolves them against its backends' catalogue (the backstop: a name
that survives this module but names nothing real is reported as unknown and never queried). It
knows no estate: nothing here names a service, metric or value of any deployment.

A single word (`frontend`) has no shape that tells a service from an ordinary word (`error`,
`cpu`, `why`): `plain_word_mentions` lists such words only as candidates. The executor, which
can ask its backends, checks one only when their catalogue knows it (ignoring case), exactly as a
planned service; a candidate the catalogue does not know, or any candidate when there is no
catalogue to ask, is no service and is never reported as an unknown one.
"""

from __future__ import annotations

import re

from shared.core.tool_catalogue import GET_CURRENT_TIME, LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS

# The most names one question can carry into a plan (a bound on plan size, not the per-question
# limit on checked services, which is the executor's setting).
MAX_NAMED_SERVICES = 50

# Lower-case ASCII words joined by '-', '_' or '.', at least two words.
# Not after `<word>:` — that is the reading part of a series name (`up:targets_down`).
_IDENTIFIER = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?<![A-Za-z0-9_]:)([a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+)(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])"
)
# Words that match the identifier shape but are not services.
_GENERIC_WORDS = frozenset({
    "e.g", "i.e", "etc", "on-call", "real-time", "follow-up", "end-to-end", "built-in", "read-only",
    "time-out", "re-try", "up-to-date", "out-of-memory", "root-cause", "roll-back", "hot-fix",
    "k8s.io", "x-request-id", "node.js", "vue.js", "next.js",
})
# Attest's own protocol: tool names, executor_evidence_v2 and Draft fields, plan arguments.
PROTOCOL_WORDS = frozenset({
    QUERY_METRICS, QUERY_LOGS, QUERY_CHANGES, LOOKUP_KNOWLEDGE, GET_CURRENT_TIME, "record_progress",
    "executor_evidence_v2", "answer_version", "claim_id", "claim_type", "claim_text", "support_level",
    "evidence_bindings", "source_type", "tool_name", "source_invocation_id", "source_invocation_ids", "raw_path",
    "evidence_excerpt", "source_id", "recommended_actions", "missing_info", "user_facing_answer",
    "diagnosis_summary", "tool_call_id", "tool_call_ids", "analysis_id", "action_plan", "missing_context",
    "requires_human_confirmation", "observation_summary", "step_seconds", "top_k", "evidence_refs",
    "verified_evidence", "claim_checks", "effective_verdict", "model_verdict", "verdict_ceiling",
    "fallback_type", "final_turn", "system_prompt",
})
# Underscore identifiers that end like a metric name are metrics, not services.
_METRIC_SUFFIXES = (
    "_percent", "_ratio", "_rate", "_ms", "_seconds", "_bytes", "_total", "_count", "_messages",
    "_connections", "_usage", "_latency", "_per_second", "_size", "_lag", "_metrics", "_logs",
)
# Underscore identifiers that end like a field, setting or argument name.
_FIELD_SUFFIXES = (
    "_version", "_id", "_ids", "_key", "_keys", "_name", "_type", "_schema", "_format", "_status", "_prompt",
    "_token", "_config", "_value", "_values", "_field", "_fields", "_mode", "_role", "_content", "_instruction",
    "_instructions", "_answer", "_output", "_input", "_result", "_results", "_text", "_level", "_path", "_url",
    "_verdict", "_score", "_flag", "_json", "_args", "_arguments", "_params", "_parameters", "_option",
    "_options", "_setting", "_settings", "_variable", "_command", "_query",
)
_FILE_SUFFIXES = (".log", ".json", ".yaml", ".yml", ".txt", ".py", ".java", ".go", ".sql", ".conf", ".xml", ".md")
_VERSION = re.compile(r"v?\d+(?:\.\d+)+")
# After an identifier: used as a quoted key (`"x":`), an assignment or a call.
_CODE_AFTER = re.compile(r"""["'`]\s*:|\s*=""")
_CALL_OR_ASSIGN_AFTER = re.compile(r"""[=(]""")
# A snake_case identifier the text calls a table, column, field, parameter or variable.
_DATA_NOUN_AFTER = re.compile(r"\s*(?:表(?![现示明达格])|字段|列|参数|变量|配置项|table\b|column\b|field\b)")
_DATA_NOUN_BEFORE = re.compile(r"(?:\btable|\bcolumn|\bfield|表|字段|列|参数|变量|配置项)\s*$")
# 「checkout-api 的 queue_depth」「它的 queue_depth」: a snake_case word owned by a service just named,
# or by a pronoun standing for one, is that service's series (or field), not another service.
_OWNER_BEFORE = re.compile(r"(?:(?P<owner>[a-z0-9][a-z0-9_.\-]*)|它|其|该服务|这个服务)\s*的\s*$")


def _is_snake_case(word: str) -> bool:
    return "_" in word and "-" not in word and "." not in word


def _used_as_code(word: str, text: str, start: int, end: int) -> bool:
    if _CALL_OR_ASSIGN_AFTER.match(text, end):
        return True
    if not _is_snake_case(word):
        return False
    return (_CODE_AFTER.match(text, end) is not None or _DATA_NOUN_AFTER.match(text, end) is not None
            or _DATA_NOUN_BEFORE.search(text[max(0, start - 12):start]) is not None)


def _owned(word: str, text: str, start: int, found: list[str]) -> bool:
    """Whether a snake_case `word` is written as something a named service (or 它) has."""
    if not _is_snake_case(word):
        return False
    owner = _OWNER_BEFORE.search(text[max(0, start - 80):start])
    return owner is not None and (owner["owner"] is None or owner["owner"].strip(".") in found)


def is_service_word(word: str) -> bool:
    """Whether `word` (lower case), wherever it stands, can be a service name at all."""
    if word in _GENERIC_WORDS or word in PROTOCOL_WORDS or word.endswith(_FILE_SUFFIXES):
        return False
    if _VERSION.fullmatch(word):
        return False
    if _is_snake_case(word) and word.endswith(_METRIC_SUFFIXES + _FIELD_SUFFIXES):
        return False
    return True


def extract_service_names(text: str, limit: int = MAX_NAMED_SERVICES) -> list[str]:
    """Identifiers in `text` that name services, lower-cased, in order of appearance, each once,
    at most `limit` of them."""
    lowered = text.lower()
    found: list[str] = []
    for match in _IDENTIFIER.finditer(lowered):
        word = match.group(1).strip(".")
        if (not is_service_word(word) or _used_as_code(word, lowered, match.start(1), match.end(1))
                or _owned(word, lowered, match.start(1), found)):
            continue
        if word not in found:
            found.append(word)
            if len(found) >= limit:
                break
    return found


# One ASCII word, not part of a longer identifier, a path, a version, a `key:value` or `key=value`.
_PLAIN_WORD = re.compile(r"(?<![A-Za-z0-9_.\-:/@#$%=])([a-z][a-z0-9]*)(?![A-Za-z0-9_\-:/@(]|\.[A-Za-z0-9])")
# A single letter is a variable or a unit, never a name.
MIN_PLAIN_WORD_CHARS = 2


def is_plain_word(name: str) -> bool:
    """Whether `name` is one word (no '-', '_' or '.'): a service name only if a catalogue says so."""
    word = name.strip().lower()
    return bool(word) and _PLAIN_WORD.fullmatch(word) is not None


def plain_word_mentions(text: str, limit: int = MAX_NAMED_SERVICES) -> list[str]:
    """Single words of `text` that could name a service, lower-cased, in order of appearance,
    each once, at most `limit`: candidates that only the backends' catalogue can confirm. Words of
    Attest's protocol, words used as code (`f(`, `x=`) and words shorter than
    MIN_PLAIN_WORD_CHARS are left out."""
    lowered = text.lower()
    found: list[str] = []
    for match in _PLAIN_WORD.finditer(lowered):
        word = match.group(1)
        if (len(word) < MIN_PLAIN_WORD_CHARS or word in found or not is_service_word(word)
                or _used_as_code(word, lowered, match.start(1), match.end(1))):
            continue
        found.append(word)
        if len(found) >= limit:
            break
    return found


def mentions_service(text: str, name: str) -> bool:
    """Whether `text` names `name` as a service: an extracted mention, or (for a name the
    identifier shape misses, e.g. one word) the whole word in the text and not a protocol word."""
    word = name.strip().lower()
    if not word or not is_service_word(word):
        return False
    if word in extract_service_names(text, limit=10 * MAX_NAMED_SERVICES):
        return True
    if _IDENTIFIER.fullmatch(word):
        return False  # identifier-shaped, yet not extracted: the text uses it as something else
    lowered = text.lower()
    return re.search(rf"(?<![a-z0-9_.\-]){re.escape(word)}(?![a-z0-9_\-]|\.[a-z0-9])", lowered) is not None
