"""The logic must not know the held-out data: no service name, host, metric name, change, incident
or distinctive log value of `tests/scenarios/` may appear in the source of `services/`, `shared/` or
`gateway/`. Otherwise the scenario evaluation measures what the code was told,
not what it can do on an estate it has never seen.

What is held out is read from the scenario data itself, so a new service or template is covered
without touching this file:
- the estate's service names, hosts and metric names, incident ids and titles, change summaries;
- from every log template and change summary, the identifier-shaped values (dotted, slashed or
  hyphenated words such as config keys, versions, loggers, paths, RPC methods), after removing
  the placeholders and the field names (`key=` and `"key":` are log-format vocabulary that code
  may legitimately know, e.g. `request_id`);
- the service-shaped names of the unknown-service cases (the misspellings the resolver must not
  have been taught).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.executor.estate import _PLACEHOLDER, read_estate_description
from tests.eval.scenario_eval import CASES_DIR, ESTATE_DIR, load_cases

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("services", "shared", "gateway")
DEMO = REPO_ROOT / "demo"
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[._/:-][A-Za-z0-9]+)+")
_SERVICE_SHAPED = re.compile(r"(?<![A-Za-z0-9_.\-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![A-Za-z0-9_\-])")
_LOGFMT_KEY = re.compile(r"\b[A-Za-z_][A-Za-z0-9_.]*=")
_JSON_KEY = re.compile(r'"[A-Za-z_][A-Za-z0-9_]*"\s*:')
MIN_TOKEN_CHARS = 6
# Identifier-shaped words of the templates that are protocol or format vocabulary, not scenario
# data: code may know them for reasons of its own.
GENERIC = frozenset({"http/1.1", "http/2.0", "mozilla/5.0", "example.test", "postfix/smtp", "static/app"})
GENERIC_PREFIXES = ("usr/local/lib/python",)


def _values_of(text: str) -> set[str]:
    text = _PLACEHOLDER.sub(" ", text)
    text = _JSON_KEY.sub(" ", _LOGFMT_KEY.sub(" ", text))
    tokens = set()
    for match in _IDENTIFIER.finditer(text):
        token = match.group(0).strip(".:/-")
        lowered = token.casefold()
        if len(token) >= MIN_TOKEN_CHARS and lowered not in GENERIC and not lowered.startswith(GENERIC_PREFIXES):
            tokens.add(token)
    return tokens


def held_out_terms() -> dict[str, str]:
    """term -> where it comes from."""
    estate = read_estate_description(ESTATE_DIR)
    terms: dict[str, str] = {}

    def add(term: str, origin: str) -> None:
        terms.setdefault(term, origin)

    for name in estate.metrics:
        add(name, "metric name")
    for service in estate.services:
        add(service.name, "service name")
        for host in service.hosts:
            add(host, f"host of {service.name}")
        for template in service.logs:
            for token in _values_of(template.template):
                add(token, f"log template of {service.name}")
        for change in service.changes:
            add(change.summary, f"change of {service.name}")
            for token in _values_of(change.summary):
                add(token, f"change of {service.name}")
    for incident in estate.incidents:
        add(incident.id, "incident id")
        if incident.title:
            add(incident.title, f"title of {incident.id}")
        for template in incident.logs:
            for token in _values_of(template.template):
                add(token, f"log template of {incident.id}")
        for change in incident.changes:
            add(change.summary, f"change of {incident.id}")
            for token in _values_of(change.summary):
                add(token, f"change of {incident.id}")
    for case in load_cases(CASES_DIR):
        if "unknown_service" in case.tags:
            for name in _SERVICE_SHAPED.findall(case.question):
                add(name, f"unknown service of case {case.id}")
    return terms


def _source_files(root: Path) -> list[Path]:
    return [
        path for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    ]


def test_the_held_out_set_is_substantial():
    terms = held_out_terms()
    origins = {origin.split(" ")[0] for origin in terms.values()}
    # A broken extraction would make the leak test pass vacuously.
    assert len(terms) >= 60, sorted(terms)
    assert {"metric", "service", "host", "log", "change", "incident", "unknown"} <= origins, origins
    assert "render.pdf.font_dir" in terms and "ledger-api" in terms and "heap_used_bytes" in terms


@pytest.mark.parametrize("folder", SCANNED)
def test_no_scenario_data_in_the_logic(folder):
    terms = held_out_terms()
    lowered = {term: term.casefold() for term in terms}
    leaks: list[str] = []
    files = _source_files(REPO_ROOT / folder)
    assert files, f"nothing to scan under {folder}/"
    for path in files:
        text = path.read_text(encoding="utf-8", errors="ignore").casefold()
        for term, needle in lowered.items():
            if needle in text:
                leaks.append(f"{path.relative_to(REPO_ROOT)}: {term!r} ({terms[term]})")
    assert not leaks, "held-out scenario data appears in the logic:\n" + "\n".join(leaks)


def test_the_scenario_estate_is_not_the_demo_estate():
    """Held out means held out: none of its service or metric names is demo data either."""
    estate = read_estate_description(ESTATE_DIR)
    names = [s.name for s in estate.services] + list(estate.metrics)
    demo_text = "\n".join(p.read_text(encoding="utf-8", errors="ignore") for p in _source_files(DEMO)).casefold()
    shared = [name for name in names if re.search(rf"(?<![a-z0-9_\-]){re.escape(name.casefold())}(?![a-z0-9_\-])", demo_text)]
    assert not shared, f"scenario names that the demo data also uses: {shared}"
