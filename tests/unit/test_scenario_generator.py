"""The scenario generator (tests/scenarios/generator.py): a seed gives the same files every time,
the estate passes estate.py's validation, every class and log format is there, the names are
random, and each case's expectations follow the generator's ground truth."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from services.executor.estate import read_estate_description
from tests.eval.scenario_eval import load_cases
from tests.scenarios.generator import (
    CLASSES,
    CONTROL_CLASSES,
    LOG_FORMATS,
    MECHANISM_WORDS,
    build_scenario,
    write_scenario,
)

SEED = 11


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    write_scenario(SEED, out)
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def _incidents(root: Path) -> list[dict]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted((root / "estate" / "incidents").glob("*.json"))]


def _templates(root: Path) -> list[str]:
    services = json.loads((root / "estate" / "services.json").read_text(encoding="utf-8"))["services"]
    return [t["template"] for s in services for t in s["logs"]] + [t["template"] for i in _incidents(root) for t in i["logs"]]


def test_the_same_seed_writes_the_same_files(generated: Path, tmp_path: Path) -> None:
    write_scenario(SEED, tmp_path)
    assert _tree(tmp_path) == _tree(generated)


def test_another_seed_writes_other_files(generated: Path, tmp_path: Path) -> None:
    write_scenario(SEED + 1, tmp_path)
    assert (tmp_path / "estate" / "services.json").read_bytes() != (generated / "estate" / "services.json").read_bytes()


def test_the_estate_passes_estate_validation(generated: Path) -> None:
    description = read_estate_description(generated / "estate")
    assert len(description.incidents) >= 5 * len(CLASSES)
    assert description.history_minutes >= 120


def test_every_class_has_at_least_five_incidents_and_cases(generated: Path) -> None:
    kinds = [incident["kind"] for incident in _incidents(generated)]
    for klass in CLASSES:
        assert kinds.count(klass) >= 5, klass
    cases = load_cases(generated / "cases")
    per_class = {klass: [c for c in cases if c.case_class == klass] for klass in CLASSES + CONTROL_CLASSES}
    for klass, items in per_class.items():
        assert items, f"no case of class {klass}"
    for klass in CLASSES:
        assert len(per_class[klass]) >= 5, klass
    assert all(case.case_class for case in cases)


def test_service_names_differ_between_seeds() -> None:
    names = [{s.name for s in build_scenario(seed).services} for seed in (1, 2, 3)]
    for a, b in ((0, 1), (0, 2), (1, 2)):
        shared = names[a] & names[b]
        assert len(shared) <= len(names[a]) // 20, f"seeds share {sorted(shared)}"


def test_no_name_contains_a_mechanism_word(generated: Path) -> None:
    """A service or host whose name contains 'cpu' or 'lag' would satisfy the judge by being named."""
    services = json.loads((generated / "estate" / "services.json").read_text(encoding="utf-8"))["services"]
    words = {w.casefold() for ws in MECHANISM_WORDS.values() for w in ws if w.isascii()}
    for service in services:
        for name in [service["name"], *service["hosts"]]:
            assert not [w for w in words if w in name.casefold()], name


def test_every_log_format_occurs(generated: Path) -> None:
    assert {s.style.kind for s in build_scenario(SEED).services} == set(LOG_FORMATS)
    templates = _templates(generated)
    json_lines = [t for t in templates if t.startswith('{"')]
    assert json_lines and all(isinstance(json.loads(t), dict) for t in json_lines)
    assert any(re.match(r"^(level|lvl)=\w+ logger=", t) for t in templates), "logfmt"
    assert any(re.match(r"^\[[^\]]+\] [A-Z]+ \S+ - ", t) for t in templates), "[thread] LEVEL logger - message"
    assert any(re.match(r'^\{ip\} - - "(GET|POST) \S+ HTTP/1\.1" \d{3} ', t) for t in templates), "access log"
    assert any("\nTraceback (most recent call last):\n" in t for t in templates), "Python traceback"
    assert any("\n\tat " in t for t in templates), "Java stack trace"
    no_level = [t for t in templates if re.match(r"^[a-z]+\.[a-z.]+ \| ", t)]
    assert no_level and not any(re.search(r"\b(INFO|WARN|WARNING|ERROR|DEBUG|level=|lvl=)\b", t) for t in no_level)
    assert any(t.startswith("[gc] ") for t in templates), "a line with a shape of its own"


def test_causes_precede_the_symptom_and_share_an_identifier_with_the_logs(generated: Path) -> None:
    def squash(text: str) -> str:
        return re.sub(r"[._-]", "", text.casefold())

    checked = 0
    for incident in _incidents(generated):
        if incident["kind"] not in ("config_change", "bad_release", "slow_query", "cache_hit_collapse"):
            continue
        logs = " ".join(t["template"] for t in incident["logs"])
        causes = [c for c in incident["changes"] if c["offset_minutes"] < 0 and "仅" not in c["summary"]]
        assert len(causes) == 1, incident["id"]
        identifiers = re.findall(r"[A-Za-z][\w.]*[._]\w+|v\d+\.\d+\.\d+", causes[0]["summary"])
        # Exactly, or contained: report.export.concurrency / report-export-7, idx_orders_sku / orders.
        tokens = {squash(t) for t in re.findall(r"[A-Za-z][\w.-]{4,}", logs)}
        shared = [i for i in identifiers if i in logs or squash(i.rsplit(".", 1)[0]) in squash(logs)
                  or any(len(t) >= 5 and t in squash(i) for t in tokens)]
        assert shared, f"{incident['id']}: no identifier of {causes[0]['summary']!r} in its logs"
        checked += 1
    assert checked >= 20


def test_expectations_follow_the_ground_truth(generated: Path) -> None:
    cases = {case.id: case for case in load_cases(generated / "cases")}
    scenario = build_scenario(SEED)
    with_decoy = [i for i in scenario.incidents if i.decoy_terms]
    assert with_decoy, "some incidents carry decoys"
    templates = " ".join(_templates(generated))
    for incident in with_decoy:
        if incident.facets and any(f.startswith("decoy_change") for f in incident.facets):
            assert incident.decoy_terms[0] not in templates, "a decoy change shares nothing with the logs"
    for case in cases.values():
        first = case.issue15.first_line if case.issue15 else None
        if case.case_class == "healthy":
            assert case.expect.multi_agent == ["PASS"] and case.expect.single_react == ["SUCCESS"]
            assert first is not None and "在所查范围内未发现异常" in first.must_contain
        elif case.case_class == "no_data":
            assert "PASS" not in case.expect.multi_agent
            assert "在所查范围内未发现异常" in case.opening.must_not_contain
        elif case.issue15 and case.issue15.kind == "yes_no" and "hypothesis_no" in case.tags:
            assert "是：" in first.must_not_contain
        elif case.issue15 and case.issue15.kind == "yes_no" and case.case_class in CLASSES:
            assert "是：" in first.must_contain
    # A why-question about an incident with a change cause asks for the change's identifier.
    asked = 0
    for incident in scenario.incidents:
        if incident.klass != "config_change":
            continue
        about = [c for c in cases.values() if c.case_class == "config_change" and c.opening.must_contain
                 and re.search(rf"(?<![\w-]){re.escape(incident.service)}(?![\w-])", c.question)]
        for case in about:
            assert any(incident.cause_terms[0] in term for term in case.opening.must_contain), case.id
            asked += 1
    assert asked >= 3
