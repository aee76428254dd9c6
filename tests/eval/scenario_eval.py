"""Scenario evaluation: every case of `tests/scenarios/cases/` asked in both modes against the six
real services over an estate the code has never seen (`tests/scenarios/estate/`).

    python -m tests.eval.scenario_eval [--out FILE] [--only CASE_ID ...]      (`make eval`)
    python -m tests.eval.scenario_eval --seed N|random [--out FILE]         (`make eval SEED=N`)
    python -m tests.eval.scenario_eval --scenarios DIR [--out FILE]

Without flags it runs the held-out set of `tests/scenarios/`. `--seed` generates a scenario set
with `tests/scenarios/generator.py` into the run's work directory and runs that (`random` picks a
seed and prints it); `--scenarios DIR` runs a set already on disk (DIR/estate, DIR/cases and
DIR/knowledge, the layout the generator writes). Cases that carry a `class` are also scored per
class (a table and the report's `by_class`): a case-mode run counts as passed when every rule of
the case holds, its `issue15` rules included.

A case is a question and what an honest answer to it looks like: the outcome type per mode (a set
where more than one is honest), words the answer's opening must or must not contain, words the
whole answer must or must not contain, and words that must or must not appear as confirmed. The
run prints a table and a score and writes a JSON report. It is a report: failing cases still exit
0; only a broken harness (unreadable cases, an estate that does not load, a cluster that does not
start) exits non-zero. `tests/integration/test_scenario_eval.py` runs the same evaluation and fails
on any case with a gated concern: 1, citations that pass the gatekeeper on unfamiliar log formats;
2, names that are not in the catalogue; 3, a question that names no service; 4, several services.

What an answer's parts are (both modes share the 【section】 layout):
- opening: the lines before the first 【section】 (the verdict line, if any) and the first
  section's lines — where the answer says what it is: a verdict and its conclusion, or the
  fallback's statement;
- first line: the first line that is neither a section title nor the verdict line (the `issue15`
  rules' "first line answers the question");
- confirmed: the lines of the sections that state facts as established — 【结论】【依据】【已确认】
  (multi-agent), 【结论】【分析】 (single-ReAct) and 【已完成的检查中观察到】 (a single-ReAct
  fallback's observed facts). A line that says a name was not found (NOT_FOUND_MARKERS) is not a
  confirmation of that name.
Words are matched as substrings after NFKC normalisation and case folding; a list inside a list of
words means "any of these".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import secrets
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal
from unittest import mock

import grpc
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.launcher import REPO_ROOT, Cluster, LaunchError
from services.executor.estate import EstateError, load_estate
from shared.db.migrate import upgrade
from shared.proto_convert import enum_number, spec_value
from tests.scenarios.generator import write_scenario

SCENARIO_DIR = REPO_ROOT / "tests" / "scenarios"
ESTATE_DIR = SCENARIO_DIR / "estate"
CASES_DIR = SCENARIO_DIR / "cases"
KNOWLEDGE_DIR = SCENARIO_DIR / "knowledge"
DEFAULT_OUT = REPO_ROOT / "tests" / "eval" / "results" / "latest.json"
WORK_DIR = REPO_ROOT / "var" / "eval"
EVAL_TOKEN = "scenario-eval-token"
MODES = ("multi_agent", "single_react")
MODE_ENUM = {"multi_agent": "MULTI_AGENT", "single_react": "SINGLE_REACT"}
MODE_SHORT = {"multi_agent": "MA", "single_react": "SR"}
CALL_TIMEOUT_SECONDS = 120.0
GATED_POINTS = frozenset({1, 2, 3, 4})

VERDICTS = ("PASS", "LOW_CONFID", "REJECT")
# Every fallback type the generated enum knows, plus UNKNOWN_SERVICE for names not in the catalogue.
FALLBACK_TYPES = tuple(sorted(
    {v for v in (spec_value(enums_pb2.FallbackType.DESCRIPTOR, n.number)
                 for n in enums_pb2.FallbackType.DESCRIPTOR.values) if v} | {"UNKNOWN_SERVICE"}
))
OUTCOMES = {"multi_agent": frozenset(VERDICTS + FALLBACK_TYPES), "single_react": frozenset(("SUCCESS",) + FALLBACK_TYPES)}

CONFIRMED_SECTIONS = frozenset({"结论", "依据", "已确认", "分析", "已完成的检查中观察到"})
VERDICT_LINE_PREFIX = "可信度："
NOT_FOUND_MARKERS = ("没有找到服务", "未找到服务", "找不到服务", "不存在", "未知服务", "不在服务目录", "服务目录中没有")
_SECTION = re.compile(r"^【(.+?)】\s*$")

# The tags a case can carry, and how many cases the held-out set must hold of each.
TAG_MINIMUMS = {
    "healthy_control": 4, "hypothesis": 3, "hypothesis_no": 1, "unknown_service": 2, "multi_service": 2,
    "no_service": 2, "injection": 2, "unrelated_release": 1,
}
LOG_FORMAT_TAGS = ("log_json", "log_logfmt", "log_access", "log_traceback")
MIN_LOG_FORMATS = 3
MIN_CASES = 24
# Tags of generated sets (tests/scenarios/generator.py): formats the held-out set does not count,
# and questions about windows the estate does not cover.
GENERATED_TAGS = frozenset({"log_plain", "log_no_level", "no_data"})
KNOWN_TAGS = frozenset(TAG_MINIMUMS) | frozenset(LOG_FORMAT_TAGS) | {"why", "metric_name"} | GENERATED_TAGS


# --- cases -------------------------------------------------------------------------------------

Term = str | list[str]  # a word, or a list of alternatives (any of them)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WordRules(_Strict):
    must_contain: list[Term] = Field(default_factory=list)
    must_not_contain: list[str] = Field(default_factory=list)

    @field_validator("must_contain")
    @classmethod
    def _non_empty_terms(cls, terms: list[Term]) -> list[Term]:
        for term in terms:
            if (isinstance(term, str) and not term.strip()) or (isinstance(term, list) and not all(t.strip() for t in term)) \
                    or term == []:
                raise ValueError("empty word")
        return terms


class Expectation(_Strict):
    multi_agent: list[str] = Field(min_length=1)
    single_react: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _known_outcomes(self) -> Expectation:
        for mode in MODES:
            unknown = set(getattr(self, mode)) - OUTCOMES[mode]
            if unknown:
                raise ValueError(f"{mode}: unknown outcome(s) {sorted(unknown)}; known: {sorted(OUTCOMES[mode])}")
        return self


class Issue15(_Strict):
    """The first-line rules a case holds the answer to (its first line, its outcome, words the answer must or
    must not contain); `make test` fails on a case that misses it (tests/integration/
    test_scenario_eval.py)."""

    kind: Literal["yes_no", "why", "health", "what"]
    hypothesis: str | None = None
    outcome: Expectation | None = None
    first_line: WordRules = Field(default_factory=WordRules)
    answer_must_contain: list[Term] = Field(default_factory=list)
    answer_must_not_contain: list[str] = Field(default_factory=list)


class Case(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{2,80}$")
    question: str = Field(min_length=1, max_length=2000)
    tags: list[str] = Field(min_length=1)
    concerns: list[int] = Field(default_factory=list)  # gated concerns 1-4 this case holds them to
    note: str = ""
    expect: Expectation
    opening: WordRules = Field(default_factory=WordRules)
    answer: WordRules = Field(default_factory=WordRules)
    confirmed: WordRules = Field(default_factory=WordRules)
    issue15: Issue15 | None = None
    # The incident or control class a generated case belongs to (per-class scores); "" = none.
    case_class: str = Field(default="", alias="class", pattern=r"^[a-z0-9_]{0,60}$")

    @field_validator("tags")
    @classmethod
    def _known_tags(cls, tags: list[str]) -> list[str]:
        unknown = set(tags) - KNOWN_TAGS
        if unknown:
            raise ValueError(f"unknown tag(s) {sorted(unknown)}; known: {sorted(KNOWN_TAGS)}")
        return tags

    @field_validator("concerns")
    @classmethod
    def _points(cls, points: list[int]) -> list[int]:
        if any(p not in GATED_POINTS for p in points):
            raise ValueError("concerns lists issue-14 points 1-4 only (empty = none)")
        return points

    @property
    def gated(self) -> bool:
        return bool(self.concerns)


class CaseError(Exception):
    """The case files cannot be read or are inconsistent."""


def load_cases(cases_dir: Path = CASES_DIR) -> list[Case]:
    """Every case of every `*.yaml` under `cases_dir`, in file-name order, then file order."""
    files = sorted(Path(cases_dir).glob("*.yaml"))
    if not files:
        raise CaseError(f"no case files in {cases_dir}")
    cases: list[Case] = []
    for path in files:
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise CaseError(f"{path}: not valid YAML ({exc})") from None
        if not isinstance(document, list):
            raise CaseError(f"{path}: expected a list of cases")
        for index, item in enumerate(document):
            try:
                cases.append(Case.model_validate(item))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first.get("loc", ()))
                raise CaseError(f"{path} case #{index + 1}: {where}: {first.get('msg')}") from None
    ids = [case.id for case in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CaseError(f"duplicate case ids: {', '.join(duplicates)}")
    return cases


def coverage_problems(cases: list[Case]) -> list[str]:
    """What the case set lacks against its minimums (empty: nothing)."""
    problems: list[str] = []
    if len(cases) < MIN_CASES:
        problems.append(f"{len(cases)} cases, at least {MIN_CASES} wanted")
    for tag, minimum in TAG_MINIMUMS.items():
        count = sum(tag in case.tags for case in cases)
        if count < minimum:
            problems.append(f"{count} case(s) tagged {tag}, at least {minimum} wanted")
    formats = {tag for case in cases for tag in case.tags if tag in LOG_FORMAT_TAGS}
    if len(formats) < MIN_LOG_FORMATS:
        problems.append(f"log formats covered: {sorted(formats)}, at least {MIN_LOG_FORMATS} wanted")
    return problems


# --- reading an answer -------------------------------------------------------------------------


def normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


@dataclass(frozen=True)
class AnswerParts:
    opening: str
    first_line: str
    confirmed_lines: tuple[str, ...]
    text: str


def _strip_bullet(line: str) -> str:
    return line.removeprefix("- ")


def answer_parts(answer: str) -> AnswerParts:
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    for raw in answer.splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _SECTION.match(line)
        if header:
            sections.append((header.group(1), []))
        else:
            sections[-1][1].append(_strip_bullet(line))
    head = sections[0][1]
    first_section = sections[1][1] if len(sections) > 1 else []
    first_line = next((line for _, lines in sections for line in lines if not line.startswith(VERDICT_LINE_PREFIX)), "")
    confirmed = tuple(line for title, lines in sections if title in CONFIRMED_SECTIONS for line in lines)
    return AnswerParts(opening="\n".join(head + first_section), first_line=first_line,
                       confirmed_lines=confirmed, text=answer)


def _has(text: str, term: Term) -> bool:
    words = [term] if isinstance(term, str) else term
    haystack = normalise(text)
    return any(normalise(word) in haystack for word in words)


def _show(term: Term) -> str:
    return f"'{term}'" if isinstance(term, str) else "one of " + "/".join(f"'{t}'" for t in term)


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text_rules(where: str, text: str, rules: WordRules) -> list[str]:
    reasons = [f"{where} lacks {_show(term)}" for term in rules.must_contain if not _has(text, term)]
    reasons += [f"{where} contains '{word}'" for word in rules.must_not_contain if _has(text, word)]
    return reasons


def _confirmed_rules(lines: tuple[str, ...], rules: WordRules) -> list[str]:
    reasons = [f"confirmed lacks {_show(term)}" for term in rules.must_contain
               if not any(_has(line, term) for line in lines)]
    for word in rules.must_not_contain:
        for line in lines:
            if _has(line, word) and not any(marker in line for marker in NOT_FOUND_MARKERS):
                reasons.append(f"confirmed shows '{word}': {_clip(line)}")
                break
    return reasons


def judge(case: Case, mode: str, outcome: str, answer: str) -> list[str]:
    """Why this answer does not hold the case (empty: it holds)."""
    reasons: list[str] = []
    expected = getattr(case.expect, mode)
    if outcome not in expected:
        reasons.append(f"outcome {outcome}, expected {'/'.join(expected)}")
    parts = answer_parts(answer)
    reasons += _text_rules("opening", parts.opening, case.opening)
    reasons += _text_rules("answer", parts.text, case.answer)
    reasons += _confirmed_rules(parts.confirmed_lines, case.confirmed)
    return reasons


def judge_issue15(case: Case, mode: str, outcome: str, answer: str) -> list[str] | None:
    """The preview of the first-line rules' bar (None when the case records nothing for it)."""
    if case.issue15 is None:
        return None
    rules = case.issue15
    reasons: list[str] = []
    expected = getattr(rules.outcome, mode) if rules.outcome else getattr(case.expect, mode)
    if outcome not in expected:
        reasons.append(f"outcome {outcome}, issue 15 expects {'/'.join(expected)}")
    parts = answer_parts(answer)
    reasons += _text_rules("first line", parts.first_line, rules.first_line)
    reasons += _text_rules("answer", parts.text, WordRules(must_contain=rules.answer_must_contain,
                                                           must_not_contain=rules.answer_must_not_contain))
    return reasons


# --- asking ------------------------------------------------------------------------------------


def _enum_name(descriptor, number: int, prefix: str) -> str | None:
    """The spec spelling of an enum number; a number this checkout's generated code does not
    know yet (a colleague's new value) still gets a readable name."""
    if not number:
        return None
    return spec_value(descriptor, number) or f"{prefix}_{number}"


def outcome_of(mode: str, response: gateway_pb2.DiagnoseResponse) -> str:
    """The outcome type: a fallback type when the run ended in one, otherwise the effective
    verdict (multi-agent) or SUCCESS (single-ReAct's released Draft)."""
    fallback = _enum_name(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type, "FALLBACK_TYPE")
    if fallback:
        return fallback
    if mode == "single_react":
        release = _enum_name(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome, "RELEASE_OUTCOME")
        if release:
            return release
    verdict = _enum_name(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict, "VERDICT")
    return verdict or f"NO_OUTCOME(status={response.status or '-'})"


@dataclass
class CaseResult:
    case_id: str
    mode: str
    concerns: list[int]
    gated: bool
    question: str
    expected: list[str]
    got: str
    passed: bool
    reasons: list[str]
    seconds: float
    run_id: str = ""
    session_id: str = ""
    status: str = ""
    rounds: int = 0
    answer: str = ""
    issue15_passed: bool | None = None
    issue15_reasons: list[str] = field(default_factory=list)
    case_class: str = ""

    @property
    def holds(self) -> bool:
        """The case's own rules and its `issue15` rules (when it records them) both hold."""
        return self.passed and self.issue15_passed is not False

    def explain(self) -> str:
        lines = [(f"{self.case_id} [{MODE_SHORT[self.mode]}] concerns {self.concerns or 'none'}: "
                  f"expected {'/'.join(self.expected)}, got {self.got}"),
                 f"  question: {self.question}"]
        lines += [f"  - {reason}" for reason in self.reasons]
        lines += [f"  - issue 15: {reason}" for reason in self.issue15_reasons]
        lines += ["  answer:"] + [f"    | {line}" for line in self.answer.splitlines()]
        if self.run_id:
            lines.append(f"  run id: {self.run_id}")
        return "\n".join(lines)


def ask_case(stub: gateway_pb2_grpc.GatewayServiceStub, case: Case, mode: str, token: str) -> CaseResult:
    """One question in a fresh session (no session id: the gateway opens a new one)."""
    started = time.monotonic()
    expected = list(getattr(case.expect, mode))
    try:
        response = stub.Diagnose(
            gateway_pb2.DiagnoseRequest(query=case.question, mode=enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, MODE_ENUM[mode]),
                                        client_label="scenario-eval"),
            timeout=CALL_TIMEOUT_SECONDS,
            metadata=[("authorization", f"Bearer {token}")],
        )
    except grpc.RpcError as exc:
        got = f"RPC_ERROR:{exc.code().name}"
        return CaseResult(case.id, mode, list(case.concerns), case.gated, case.question, expected, got, False,
                          [f"the gateway answered {exc.code().name}: {_clip(exc.details() or '', 200)}"],
                          round(time.monotonic() - started, 3), case_class=case.case_class)
    seconds = round(time.monotonic() - started, 3)
    got = outcome_of(mode, response)
    reasons = judge(case, mode, got, response.answer)
    preview = judge_issue15(case, mode, got, response.answer)
    return CaseResult(
        case.id, mode, list(case.concerns), case.gated, case.question, expected, got, not reasons, reasons, seconds,
        run_id=response.run_id, session_id=response.session_id, status=response.status, rounds=response.rounds,
        answer=response.answer, issue15_passed=None if preview is None else not preview, issue15_reasons=preview or [],
        case_class=case.case_class,
    )


# --- the cluster -------------------------------------------------------------------------------


@contextlib.contextmanager
def scenario_cluster(work_dir: Path, *, database_url: str | None = None, token: str = EVAL_TOKEN,
                     estate_dir: Path = ESTATE_DIR, knowledge_dir: Path = KNOWLEDGE_DIR) -> Iterator[tuple[Cluster, dict]]:
    """The six services over a fresh audit store and the scenario estate (embedded engines,
    the scenario knowledge base; another set's estate and knowledge when given). Nothing of the caller's ATTEST_* or OTLP environment leaks in:
    the evaluation always measures the embedded engines on the scenario estate."""
    work_dir.mkdir(parents=True, exist_ok=True)
    database_url = database_url or f"sqlite:///{work_dir / 'attest.db'}"
    estate_url = f"sqlite:///{work_dir / 'estate.db'}"
    upgrade(database_url)
    estate = load_estate(estate_url, estate_dir)
    env = {
        "ATTEST_DATABASE_URL": database_url,
        "ATTEST_ESTATE_DATABASE_URL": estate_url,
        "ATTEST_KNOWLEDGE_DIR": str(knowledge_dir),
        "ATTEST_AUTH_TOKEN": token,
        # One caller asks every scenario: the per-principal quotas must not shape the evaluation.
        "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL": "1000",
        "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL": "100000",
        "ATTEST_MODEL_PROVIDER": "embedded",
        **{f"ATTEST_{role}_MODEL_PROVIDER": "embedded" for role in ("PLANNER", "EXECUTOR", "VERIFIER", "COMPOSER")},
    }
    inherited = [name for name in os.environ
                 if name.startswith(("ATTEST_", "OTEL_")) and name not in env]
    with mock.patch.dict(os.environ):
        for name in inherited:
            del os.environ[name]
        cluster = Cluster(env, log_dir=work_dir / "logs")  # copies the environment now
    cluster.gateway_addr = cluster.start(timeout=90)
    try:
        yield cluster, estate
    finally:
        cluster.stop()


@dataclass
class Evaluation:
    results: list[CaseResult]
    estate: dict
    started_at: str
    seconds: float
    startup_seconds: float
    dead_processes: list[str]

    def result(self, case_id: str, mode: str) -> CaseResult:
        return next(r for r in self.results if r.case_id == case_id and r.mode == mode)

    def failing_gated(self) -> list[CaseResult]:
        return [r for r in self.results if r.gated and not r.passed]


def run_evaluation(cases: list[Case], work_dir: Path, *, database_url: str | None = None,
                   progress=None, estate_dir: Path = ESTATE_DIR, knowledge_dir: Path = KNOWLEDGE_DIR) -> Evaluation:
    """Ask every case in both modes, sequentially and in order (one deterministic pass)."""
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    clock = time.monotonic()
    results: list[CaseResult] = []
    with scenario_cluster(work_dir, database_url=database_url, estate_dir=estate_dir,
                          knowledge_dir=knowledge_dir) as (cluster, estate):
        startup = time.monotonic() - clock
        with grpc.insecure_channel(cluster.gateway_addr) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            for case in cases:
                for mode in MODES:
                    result = ask_case(stub, case, mode, EVAL_TOKEN)
                    results.append(result)
                    if progress:
                        progress(result)
        dead = [name for name, proc in cluster.processes.items() if proc.process.poll() is not None]
    return Evaluation(results, estate, started_at, round(time.monotonic() - clock, 1), round(startup, 1), dead)


# --- reporting ---------------------------------------------------------------------------------


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def table(results: list[CaseResult], reason_chars: int = 100) -> str:
    header = ("case", "mode", "pts", "expected", "got", "result", "reason")
    rows = [
        (r.case_id, MODE_SHORT[r.mode], ",".join(map(str, r.concerns)) or "-", "/".join(r.expected), r.got,
         "pass" if r.passed else "FAIL", _clip("; ".join(r.reasons), reason_chars) if r.reasons else "")
        for r in results
    ]
    widths = [max(_width(row[i]) for row in rows + [header]) for i in range(len(header) - 1)]
    lines = []
    for row in [header] + rows:
        lines.append("  ".join(_pad(cell, widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1])
    return "\n".join(lines)


def score(results: list[CaseResult]) -> dict:
    def tally(items: list[CaseResult]) -> dict:
        return {"passed": sum(r.passed for r in items), "total": len(items)}

    gated = [r for r in results if r.gated]
    previews = [r for r in results if r.issue15_passed is not None]
    return {
        "all": tally(results),
        "by_mode": {mode: tally([r for r in results if r.mode == mode]) for mode in MODES},
        "issue14_points_1_4": tally(gated),
        "by_point": {str(p): tally([r for r in gated if p in r.concerns]) for p in sorted(GATED_POINTS)},
        "not_gated": tally([r for r in results if not r.gated]),
        "issue15": {"passed": sum(bool(r.issue15_passed) for r in previews), "total": len(previews)},
        "holding": {"passed": sum(r.holds for r in results), "total": len(results)},
    }


def score_lines(summary: dict) -> list[str]:
    def frac(t: dict) -> str:
        return f"{t['passed']}/{t['total']}"

    return [
        (f"score: {frac(summary['all'])} case-mode runs pass "
         f"(multi-agent {frac(summary['by_mode']['multi_agent'])}, single-ReAct {frac(summary['by_mode']['single_react'])})"),
        (f"issue 14 points 1-4 (binding in make test): {frac(summary['issue14_points_1_4'])} — "
         + ", ".join(f"point {p}: {frac(t)}" for p, t in summary["by_point"].items())),
        (f"other cases: {frac(summary['not_gated'])}; issue 15 rules: {frac(summary['issue15'])}; "
         f"every rule of the case (binding in make test): {frac(summary['holding'])}"),
    ]


def class_scores(results: list[CaseResult]) -> dict:
    """Per class (cases without one are left out): case-mode runs in which every rule of the case
    holds (`CaseResult.holds`), the total, and the percentage; `overall` over the same runs."""
    def tally(items: list[CaseResult]) -> dict:
        passed = sum(r.holds for r in items)
        return {"passed": passed, "total": len(items), "percent": round(100.0 * passed / len(items), 1) if items else 0.0}

    classed = [r for r in results if r.case_class]
    by_class = {name: tally([r for r in classed if r.case_class == name])
                for name in sorted({r.case_class for r in classed})}
    by_mode = {mode: tally([r for r in classed if r.mode == mode]) for mode in MODES}
    return {"by_class": by_class, "by_mode": by_mode, "overall": tally(classed)}


def class_table(scores: dict) -> str:
    header = ("class", "passed", "total", "%")
    rows = [(name, str(t["passed"]), str(t["total"]), f"{t['percent']:.1f}") for name, t in scores["by_class"].items()]
    rows += [(f"({MODE_SHORT[mode]})", str(t["passed"]), str(t["total"]), f"{t['percent']:.1f}")
             for mode, t in scores["by_mode"].items()]
    overall = scores["overall"]
    rows.append(("overall", str(overall["passed"]), str(overall["total"]), f"{overall['percent']:.1f}"))
    widths = [max(_width(row[i]) for row in rows + [header]) for i in range(len(header))]
    return "\n".join("  ".join(_pad(cell, widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header] + rows)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10,
                              check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def report(evaluation: Evaluation, cases: list[Case], scenarios: dict | None = None) -> dict:
    dirty = _git("status", "--porcelain", "--", "services", "shared", "gateway", "protos")
    extra: dict = {}
    if scenarios is not None:
        extra["scenarios"] = scenarios
    if any(case.case_class for case in cases):
        extra["by_class"] = class_scores(evaluation.results)
    return {
        "report": "scenario evaluation (issue 14 point 5)",
        "started_at": evaluation.started_at,
        "seconds": evaluation.seconds,
        "startup_seconds": evaluation.startup_seconds,
        "git": {"head": _git("rev-parse", "HEAD"),
                "uncommitted_changes_under_test": [line[3:] for line in dirty.splitlines()]},
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "estate": evaluation.estate,
        "cases": len(cases),
        "dead_processes": evaluation.dead_processes,
        "score": score(evaluation.results),
        **extra,
        "results": [asdict(r) for r in evaluation.results],
    }


def _seed(text: str) -> int | str:
    if text == "random":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is an integer or 'random', not {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.eval.scenario_eval", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON report (default {DEFAULT_OUT.relative_to(REPO_ROOT)})")
    parser.add_argument("--only", nargs="+", metavar="CASE_ID", help="run only these cases (the report is still written)")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help="databases and service logs of the run")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--seed", type=_seed, metavar="N|random",
                        help="generate a scenario set with this seed (tests/scenarios/generator.py) and run it")
    source.add_argument("--scenarios", type=Path, metavar="DIR", help="run the scenario set in DIR (estate/, cases/, knowledge/)")
    args = parser.parse_args(argv)

    work_dir = args.work_dir / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") / secrets.token_hex(2)
    scenarios: dict | None = None
    scenario_dir: Path | None = args.scenarios
    if args.seed is not None:
        seed = secrets.randbelow(1_000_000) if args.seed == "random" else args.seed
        if args.seed == "random":
            print(f"random seed: {seed} (rerun with --seed {seed})", flush=True)
        scenario_dir = work_dir / "scenarios"
        counts = write_scenario(seed, scenario_dir)
        scenarios = {"seed": seed, "dir": str(scenario_dir), **{k: v for k, v in counts.items() if k != "seed"}}
    elif scenario_dir is not None:
        scenarios = {"seed": None, "dir": str(scenario_dir)}
    estate_dir = scenario_dir / "estate" if scenario_dir else ESTATE_DIR
    cases_dir = scenario_dir / "cases" if scenario_dir else CASES_DIR
    knowledge_dir = KNOWLEDGE_DIR
    if scenario_dir and (scenario_dir / "knowledge").is_dir():
        knowledge_dir = scenario_dir / "knowledge"

    try:
        cases = load_cases(cases_dir)
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if scenario_dir is None:  # the minimums are the held-out set's, not a generated one's
        problems = coverage_problems(cases)
        if problems:
            print("error: the case set does not cover issue 14 point 5: " + "; ".join(problems), file=sys.stderr)
            return 2
    if args.only:
        unknown = set(args.only) - {c.id for c in cases}
        if unknown:
            print(f"error: no such case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        cases = [c for c in cases if c.id in args.only]

    shown_estate = estate_dir.relative_to(REPO_ROOT) if estate_dir.is_relative_to(REPO_ROOT) else estate_dir
    print(f"scenario evaluation: {len(cases)} cases x {len(MODES)} modes, estate {shown_estate}, "
          f"work dir {work_dir}", flush=True)

    def progress(result: CaseResult) -> None:
        mark = "pass" if result.passed else "FAIL"
        print(f"  {mark}  {result.case_id} [{MODE_SHORT[result.mode]}] {result.got} ({result.seconds:.2f}s)", flush=True)

    try:
        evaluation = run_evaluation(cases, work_dir, progress=progress, estate_dir=estate_dir, knowledge_dir=knowledge_dir)
    except (EstateError, LaunchError, OSError) as exc:
        print(f"error: the evaluation could not run: {exc}", file=sys.stderr)
        return 1

    data = report(evaluation, cases, scenarios)
    print()
    print(table(evaluation.results))
    print()
    for line in score_lines(data["score"]):
        print(line)
    if "by_class" in data:
        print()
        print("per class (a run passes when every rule of its case holds, issue-15 rules included):")
        print(class_table(data["by_class"]))
        if scenarios and scenarios.get("seed") is not None:
            print(f"seed: {scenarios['seed']}")
    print(f"time: {evaluation.seconds:.1f}s in all, {evaluation.startup_seconds:.1f}s to start the services")
    if data["git"]["uncommitted_changes_under_test"]:
        print(f"note: uncommitted changes were under test: {len(data['git']['uncommitted_changes_under_test'])} path(s)")
    if evaluation.dead_processes:
        print(f"warning: these services had exited by the end: {', '.join(evaluation.dead_processes)} "
              f"(logs in {work_dir / 'logs'})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
