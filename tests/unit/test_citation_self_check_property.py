"""Property: no citation of the embedded executor fails the gatekeeper's check,
on log formats the code has never seen.

Generated log entries — JSON objects (quotes, backslashes, nested objects, unicode escapes),
logfmt, nginx/Apache access lines, multi-line Java and Python stack traces, lines longer than the
tool's per-ref cap, tabs, CJK and full-width text — are written into the log table of a
temporary SQLite estate, read back by the real `query_logs` tool, and the embedded executor
derives its output from the real invocations. Then, against the real gatekeeper engine:

- every binding of the executor's output passes (no rule fails) and the executor's own
  self-check finds nothing to repair (the excerpts were right in the first place);
- the most telling excerpt of every returned line passes too (not only the lines the executor
  chose to claim about);
- a stack trace's ref keeps its root exception line (the last line of a Python traceback, the
  last `Caused by:` of a Java trace), and the excerpt of that line is taken from it.

2,000 examples, derandomized so that CI sees the same ones every run.
"""

from __future__ import annotations

import itertools
import json
import random
import string
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, insert

from services.executor.citation_self_check import check_output_text
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.estate import create_estate_engine, estate_metadata, log_line
from services.executor.excerpt_choice import telling_excerpt
from services.executor.tools.registry import ToolError, ToolRegistry, build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from services.executor.tools.tool_result import iso_utc
from services.gatekeeper.engine import check_executor_output
from shared.core.contracts import Plan, PlannedToolCall, RetrievalDetails, TimeWindow, ToolInvocation
from shared.core.evidence_view import evidence_view

RUN = "run-prop"
END = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START_TEXT, END_TEXT = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
EXAMPLES = 2000
_service_numbers = itertools.count(1)

# --- text and entries ------------------------------------------------------------------------
# Hypothesis draws the structure of each example (entry kinds, levels, how many services) and one
# seed per entry; the entry's text is built from that seed with `random.Random`, which keeps an
# example to a handful of draws (drawing every word through hypothesis made 2,000 examples take
# minutes) while staying reproducible: derandomized examples, and a failure names its seeds.

ASCII_CHARS = string.ascii_letters + string.digits + "_-./:=%#@"
PUNCTUATION = ["，", "。", "：", "（", "）", "【", "】", "「", "」", "...", "…", '"', "\\", "'",
               "{", "}", "[", "]", "=", ":", ";", "-", "+", "—", "、", "％", "\u200b"]
SEPARATORS = [" ", " ", " ", " ", "\t", "  ", "\u3000", ""]
UNITS = ["", "%", "ms", "s", "MB", "GiB"]


class Text:
    """Log text from one seed: ASCII, CJK and full-width words, numbers, punctuation, tabs."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def word(self) -> str:
        r = self.r
        kind = r.randrange(8)
        if kind <= 1:
            return "".join(r.choice(ASCII_CHARS) for _ in range(r.randint(1, 12)))
        if kind == 2:
            return "".join(chr(r.randint(0x4E00, 0x9FA5)) for _ in range(r.randint(1, 6)))
        if kind == 3:
            return "".join(chr(r.randint(0xFF01, 0xFF5E)) for _ in range(r.randint(1, 6)))
        if kind == 4:
            return str(r.randint(-99999, 9999999))
        if kind == 5:
            return f"{r.randint(0, 999)}.{r.randint(0, 99)}{r.choice(UNITS)}"
        if kind == 6:
            return f"{r.randint(1, 999)},{r.randint(0, 999):03d}"
        return r.choice(PUNCTUATION)

    def phrase(self, low: int = 1, high: int = 12) -> str:
        words = [self.word() + self.r.choice(SEPARATORS) for _ in range(self.r.randint(low, high))]
        return "".join(words).strip() or "x"

    def identifier(self) -> str:
        return self.r.choice(string.ascii_lowercase) + "".join(
            self.r.choice(string.ascii_lowercase + string.digits) for _ in range(self.r.randint(1, 7)))

    def class_name(self) -> str:
        return self.r.choice(string.ascii_uppercase) + "".join(
            self.r.choice(string.ascii_lowercase) for _ in range(self.r.randint(2, 9)))

    def package(self) -> str:
        return ".".join(self.identifier() for _ in range(self.r.randint(1, 3)))

    def exception(self, qualified: bool = True) -> str:
        name = self.class_name() + self.r.choice(["Exception", "Error"])
        return f"{self.package()}.{name}" if qualified else name

    def number(self) -> str:
        return self.r.choice([str(self.r.randint(0, 99999)), f"{self.r.randint(0, 999)}.{self.r.randint(0, 99)}ms"])


def json_entry(t: Text) -> tuple[str, None]:
    r = t.r
    message = t.phrase()
    if r.random() < 0.5:
        message = f"{t.phrase(1, 3)} Exception: {t.exception()}: {message}"
    record = {
        "level": r.choice(["error", "ERROR", "fatal", "warn"]),
        r.choice(["msg", "message", "error", "event"]): message,
        "trace": f"{t.exception()}: {t.phrase()}\n\tat {t.package()}.{t.class_name()}.run(X.java:{r.randint(1, 999)})",
        "ctx": {"user": {"id": t.identifier(), "name": t.phrase(1, 3)},
                "tags": [t.phrase(1, 2) for _ in range(r.randint(0, 3))],
                "n": r.choice([r.randint(-10**9, 10**9), r.uniform(-1e6, 1e6)])},
        "path": "C:\\temp\\" + t.identifier(),
    }
    if r.random() < 0.5:
        record["padding"] = t.phrase(30, 80)  # longer than the per-ref cap
    return json.dumps(record, ensure_ascii=r.random() < 0.5), None


def logfmt_entry(t: Text) -> tuple[str, None]:
    r = t.r
    fields = [
        f"level={r.choice(['error', 'warn', 'fatal'])}",
        f'msg="{t.phrase()}"',
        f'err="{t.phrase(1, 6)}"',
        f"duration={t.number()}",
        f"{t.identifier()}={t.identifier()}",
        f"trace_id={r.getrandbits(64):016x}",
    ]
    r.shuffle(fields)
    return " ".join(fields), None


def access_entry(t: Text) -> tuple[str, None]:
    r = t.r
    ip = ".".join(str(r.randint(0, 255)) for _ in range(4))
    request = f"{r.choice(['GET', 'POST', 'PUT'])} /{t.identifier()}?{t.identifier()}={t.number()} HTTP/1.1"
    line = (f"{ip} - {r.choice(['-', 'alice'])} [29/Nov/2026:10:{r.randint(10, 59)}:00 +0000] "
            f'"{request}" {r.choice([200, 404, 499, 500, 502, 503, 504])} {r.randint(0, 99999)} '
            f'"{r.choice(["-", "https://example.test/"])}" "{t.phrase(1, 4)}"')
    if r.random() < 0.5:  # Apache with the time taken, or nginx with the upstream time
        line += f" {t.number()}"
    return line, None


def java_entry(t: Text) -> tuple[str, str]:
    r = t.r

    def frames() -> list[str]:
        return [f"\tat {t.package()}.{t.class_name()}.{t.identifier()}({t.class_name()}.java:{r.randint(1, 9999)})"
                for _ in range(r.randint(1, 25))]

    top = f"{t.exception()}: {t.phrase()}"
    lines = [t.phrase(), top, *frames()]
    root = top
    for _ in range(r.randint(0, 2)):
        root = f"Caused by: {t.exception()}: {t.phrase()}"
        lines += [root, *frames(), f"\t... {r.randint(1, 99)} more"]
    return "\n".join(lines), root


def python_entry(t: Text) -> tuple[str, str]:
    r = t.r
    lines = [t.phrase()] if r.random() < 0.5 else []
    lines.append("Traceback (most recent call last):")
    for _ in range(r.randint(1, 30)):
        lines.append(f'  File "/srv/{t.identifier()}/{t.identifier()}.py", line {r.randint(1, 999)}, in {t.identifier()}')
        lines.append(f"    {t.identifier()}({t.phrase(1, 3)})")
    name = r.choice([t.exception(False), t.exception(True), "OSError"])
    root = f"{name}: {r.choice(['', '[Errno 28] '])}{t.phrase()}"
    lines.append(root)
    return "\n".join(lines), root


def long_line_entry(t: Text) -> tuple[str, None]:
    head = t.phrase(40, 120)
    if t.r.random() < 0.5:  # an exception far beyond the cap's head
        head += f" {t.exception()}: {t.phrase()}"
    return head, None


def plain_entry(t: Text) -> tuple[str, None]:
    return t.phrase(1, 20), None


KINDS = {"json": json_entry, "logfmt": logfmt_entry, "access": access_entry, "java": java_entry,
         "python": python_entry, "long_line": long_line_entry, "plain": plain_entry}
# Each entry is written once at FATAL (one line is a burst) or three times at ERROR.
LEVELED_ENTRY = st.tuples(st.sampled_from(sorted(KINDS)), st.integers(0, 2**32 - 1), st.sampled_from(["FATAL", "ERROR"]))
SERVICE_ENTRIES = st.lists(LEVELED_ENTRY, min_size=1, max_size=3)


# --- the estate and the run ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def estate(tmp_path_factory) -> tuple[object, ToolRegistry]:
    url = f"sqlite:///{tmp_path_factory.mktemp('citations') / 'estate.db'}"
    engine = create_estate_engine(url)
    # The writes are this test's own and thrown away: no fsync per example.
    event.listen(engine, "connect", lambda connection, _: connection.execute("PRAGMA synchronous=OFF"))
    estate_metadata.create_all(engine)
    yield engine, build_default_registry(build_sql_backends(url))
    engine.dispose()


class Recorder:
    """A call_tool that records each invocation of the run under an increasing id."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry
        self.invocations: list[ToolInvocation] = []

    def __call__(self, tool_name: str, arguments: dict) -> ToolInvocation:
        invocation_id = len(self.invocations) + 1
        try:
            result = self.registry.invoke(tool_name, arguments)
        except ToolError as exc:  # a harness problem, reported by the asserts below
            invocation = ToolInvocation(invocation_id=invocation_id, run_id=RUN, tool_name=tool_name,
                                        lifecycle="ERROR", evidence_status="ERROR", error=str(exc))
        else:
            invocation = ToolInvocation(
                invocation_id=invocation_id, run_id=RUN, tool_name=tool_name, lifecycle="READY",
                evidence_status=result.evidence_status, request=result.request_scope,
                agent_result=result.agent_result, retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()),
            )
        self.invocations.append(invocation)
        return invocation


def _write(engine, entries_by_service: dict[str, list]) -> dict[tuple[str, str], tuple[str, str | None]]:
    """Insert the entries; returns (service, row timestamp as refs spell it) → (message, root
    exception line or None)."""
    rows, by_stamp = [], {}
    for service, entries in entries_by_service.items():
        minute = 1
        for kind, seed, level in entries:
            message, root = KINDS[kind](Text(seed))
            for _ in range(1 if level == "FATAL" else 3):
                ts = END - timedelta(minutes=minute)
                minute += 1
                rows.append({"service": service, "ts": ts, "level": level, "host": f"{service}-0", "message": message})
                by_stamp[(service, iso_utc(ts))] = (message, root)
    with engine.begin() as connection:
        connection.execute(insert(log_line), rows)
    return by_stamp


def _message_start(text: str) -> int:
    head = text.split("\n", 1)[0]
    host = head.index(" host=")
    return head.index(" ", host + 1) + 1


def _all_pass(output_text: str, invocations: list[ToolInvocation]) -> None:
    check = check_executor_output(RUN, output_text, invocations)
    result = check.gatekeeper_result
    assert check.parse_status == "valid", check.parse_detail
    assert result is not None and result.failed_rules == [], result.errors
    assert all(b.outcome == "passed" for b in result.checked_bindings), result.checked_bindings


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(services=st.lists(SERVICE_ENTRIES, min_size=1, max_size=2))
def test_no_citation_of_the_embedded_executor_fails_the_gatekeeper(estate, services):
    engine, registry = estate
    entries = {f"prop-{next(_service_numbers)}": service for service in services}
    by_stamp = _write(engine, entries)
    recorder = Recorder(registry)
    plan = Plan(
        services=list(entries), window=TimeWindow(start=START_TEXT, end=END_TEXT),
        steps=[PlannedToolCall(tool_name="query_logs", arguments={"service": s, "start": START_TEXT, "end": END_TEXT})
               for s in entries],
    )
    text = EmbeddedExecutorAgent().run(plan, recorder, "有什么异常？")
    output = json.loads(text)

    # The executor's own output: every binding passes, and its self-check has nothing to repair.
    assert output["claims"], "every entry is a burst: the executor must report something"
    _all_pass(text, recorder.invocations)
    checked = check_output_text(text, recorder.invocations, RUN)
    assert not checked.report.changed and checked.text == text, checked.report

    # The most telling excerpt of every returned line passes as well.
    claims = []
    for invocation in recorder.invocations:
        assert invocation.lifecycle == "READY", invocation.error
        service = invocation.request["service"]
        for ref in evidence_view(invocation).refs():
            if not ref.raw_path.startswith("hits["):
                continue
            start = _message_start(ref.text)
            excerpt = telling_excerpt(ref.text, start)
            assert excerpt is not None, ref.text
            claims.append({
                "claim_id": f"h{len(claims)}", "claim_type": "observation", "claim_text": excerpt, "support_level": "direct",
                "evidence_bindings": [{"source_type": "logs", "tool_name": "query_logs",
                                       "source_invocation_id": invocation.invocation_id, "raw_path": ref.raw_path,
                                       "evidence_excerpt": excerpt}],
            })
            # A stack trace keeps its root exception line (whole, unless the line alone is near
            # the cap; then its head), and the excerpt prefers it.
            message, root = by_stamp[(service, ref.timestamp)]
            assert len(ref.text) <= 500
            if root is not None:
                kept = root if len(root) <= 350 else root[:39]
                assert kept in ref.text, (root, ref.text)
                assert excerpt in root, (excerpt, root)
            elif len(message) + start <= 500:
                assert ref.text[start:] == message  # short entries are kept whole
    _all_pass(json.dumps({"answer_version": "executor_evidence_v2", "claims": claims, "hypotheses": [],
                         "recommended_actions": [], "missing_info": []}, ensure_ascii=False),
              recorder.invocations)
