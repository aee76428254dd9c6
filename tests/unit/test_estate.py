"""The demo estate: its description expands into a realistic, deterministic estate database."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from services.executor.estate import (
    DEFAULT_ESTATE_DIR,
    EstateError,
    change_record,
    load_estate,
    log_line,
    metric_point,
    read_estate_description,
)

REPO = Path(__file__).resolve().parents[2]
ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)


def _rows(url: str) -> dict[str, list[tuple]]:
    engine = create_engine(url)
    with engine.connect() as connection:
        dump = {
            "metric_point": connection.execute(
                select(metric_point.c.service, metric_point.c.metric, metric_point.c.ts, metric_point.c.value, metric_point.c.unit)
                .order_by(metric_point.c.service, metric_point.c.metric, metric_point.c.ts)
            ).all(),
            "log_line": connection.execute(
                select(log_line.c.service, log_line.c.ts, log_line.c.level, log_line.c.host, log_line.c.message).order_by(log_line.c.id)
            ).all(),
            "change_record": connection.execute(
                select(change_record.c.service, change_record.c.ts, change_record.c.kind, change_record.c.summary).order_by(change_record.c.id)
            ).all(),
        }
    engine.dispose()
    return dump


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    url = f"sqlite:///{tmp_path_factory.mktemp('estate') / 'estate.db'}"
    return url, load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)


def test_demo_description_covers_the_required_incident_kinds_and_healthy_services() -> None:
    description = read_estate_description(DEFAULT_ESTATE_DIR)
    kinds = {incident.kind for incident in description.incidents}
    assert len(description.incidents) >= 8 and len(kinds) == len(description.incidents)
    for word in ("cpu", "pool", "deploy", "memory", "disk", "timeout", "cert", "queue"):
        assert any(word in kind for kind in kinds), f"no incident of kind *{word}*"
    faulty = [incident.service for incident in description.incidents]
    assert len(set(faulty)) == len(faulty)  # one incident per service: each diagnosis is unambiguous
    healthy = [s.name for s in description.services if s.name not in faulty]
    assert len(healthy) >= 2
    # Changes shortly before some onsets, and routine changes unrelated to any incident.
    assert sum(1 for i in description.incidents if any(-60 < c.offset_minutes <= 0 for c in i.changes)) >= 4
    assert any(s.changes for s in description.services)


def test_load_writes_counts_that_match_the_database(demo: tuple[str, dict]) -> None:
    url, counts = demo
    description = read_estate_description(DEFAULT_ESTATE_DIR)
    series = sum(len(s.metrics) for s in description.services)
    assert counts["services"] == len(description.services)
    assert counts["incidents"] == len(description.incidents)
    assert counts["metric_points"] == series * (description.history_minutes + 1)
    routine = sum(1 for s in description.services for c in s.changes if c.minutes_ago <= description.history_minutes)
    assert counts["change_records"] == sum(len(i.changes) for i in description.incidents) + routine
    assert counts["log_lines"] >= 500
    assert counts["anchor"] == "2026-11-29T11:00:00Z"
    rows = _rows(url)
    assert len(rows["metric_point"]) == counts["metric_points"]
    assert len(rows["log_line"]) == counts["log_lines"]
    assert len(rows["change_record"]) == counts["change_records"]


def test_every_series_has_at_least_sixty_one_minute_points_ending_at_the_anchor(demo: tuple[str, dict]) -> None:
    url, _ = demo
    engine = create_engine(url)
    with engine.connect() as connection:
        stats = connection.execute(
            select(metric_point.c.service, metric_point.c.metric, func.count(), func.min(metric_point.c.ts), func.max(metric_point.c.ts))
            .group_by(metric_point.c.service, metric_point.c.metric)
        ).all()
        first_two = connection.execute(
            select(metric_point.c.ts).order_by(metric_point.c.service, metric_point.c.metric, metric_point.c.ts).limit(2)
        ).scalars().all()
    engine.dispose()
    assert stats
    for service, metric, count, _, _ in stats:
        assert count >= 60, f"{service}/{metric} has {count} points"
    assert first_two[1] - first_two[0] == timedelta(minutes=1)
    assert first_two[0].tzinfo is not None  # read back timezone-aware


def test_logs_are_realistic_and_inside_the_history(demo: tuple[str, dict]) -> None:
    url, _ = demo
    rows = _rows(url)["log_line"]
    levels = {row[2] for row in rows}
    assert {"INFO", "WARN", "ERROR"} <= levels
    assert all(ANCHOR - timedelta(minutes=121) <= row[1] <= ANCHOR for row in rows)
    assert any(re.search(r"[\u4e00-\u9fff]", row[4]) for row in rows), "no Chinese log messages"
    assert any(re.search(r"trace_?id=[0-9a-f]{32}", row[4], re.I) for row in rows), "no trace ids"
    assert not any("{" in row[4] and re.search(r"\{(int|trace_id|hex|choice):?", row[4]) for row in rows)


def test_same_seed_and_anchor_give_identical_rows_and_another_seed_does_not(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db", "c.db")]
    load_estate(urls[0], DEFAULT_ESTATE_DIR, anchor=ANCHOR, seed=11)
    load_estate(urls[1], DEFAULT_ESTATE_DIR, anchor=ANCHOR, seed=11)
    load_estate(urls[2], DEFAULT_ESTATE_DIR, anchor=ANCHOR, seed=12)
    first, second, other = (_rows(url) for url in urls)
    assert first == second
    assert first["metric_point"] != other["metric_point"]


def test_reload_replaces_previous_contents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR - timedelta(hours=3))
    counts = load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    rows = _rows(url)
    assert len(rows["metric_point"]) == counts["metric_points"]
    assert len(rows["log_line"]) == counts["log_lines"]
    assert max(row[2] for row in rows["metric_point"]) == ANCHOR


def test_default_anchor_is_now_floored_to_the_minute(tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(second=0, microsecond=0)
    counts = load_estate(f"sqlite:///{tmp_path / 'estate.db'}", DEFAULT_ESTATE_DIR)
    anchor = datetime.fromisoformat(counts["anchor"].replace("Z", "+00:00"))
    assert anchor.second == 0 and before <= anchor <= before + timedelta(minutes=1)


def test_inconsistent_descriptions_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "services.json").write_text(json.dumps({
        "metrics": {"cpu_usage_percent": {"unit": "percent"}},
        "services": [{"name": "a-svc", "hosts": ["h1"], "metrics": {"cpu_usage_percent": {"baseline": 10}}}],
        "incidents": [{"id": "X", "service": "b-svc", "kind": "k", "start_offset_minutes": 5, "duration_minutes": 5}],
    }))
    with pytest.raises(EstateError, match="unknown service 'b-svc'"):
        read_estate_description(tmp_path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.executor.estate", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_cli_loads_and_prints_one_summary_line(tmp_path: Path) -> None:
    result = _cli("load", "--url", f"sqlite:///{tmp_path / 'e.db'}", "--anchor", "2026-11-29T11:00:00Z")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "metric points" in lines[0] and "log lines" in lines[0]


@pytest.mark.parametrize("case", ["missing_dir", "no_services_json", "broken_json"])
def test_cli_bad_estate_dir_exits_2_with_one_error_line(tmp_path: Path, case: str) -> None:
    estate = tmp_path / "estate"
    if case != "missing_dir":
        estate.mkdir()
    if case == "broken_json":
        (estate / "services.json").write_text("{not json")
    result = _cli("load", "--url", f"sqlite:///{tmp_path / 'e.db'}", "--dir", str(estate))
    assert result.returncode == 2
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error:")
    assert "Traceback" not in result.stderr


def _code_literals(path: Path) -> list[str]:
    """String literals of a module except docstrings (examples in prose are not logic)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_logic_does_not_know_the_demo_estate() -> None:
    """The estate is data: no literal in the code names a service, host, incident id or title of it."""
    description = read_estate_description(DEFAULT_ESTATE_DIR)
    needles = [s.name for s in description.services]
    needles += [i.id for i in description.incidents] + [i.title for i in description.incidents if i.title]
    needles += [host for s in description.services for host in s.hosts]
    code = [p for d in ("services", "gateway", "shared") for p in (REPO / d).rglob("*.py")]
    assert code
    for path in code:
        for literal in _code_literals(path):
            for needle in needles:
                assert needle not in literal, f"{path.relative_to(REPO)} mentions demo data {needle!r}"


def test_the_knowledge_base_ships_chinese_runbooks_and_incident_notes() -> None:
    knowledge = REPO / "demo" / "knowledge"
    runbooks = sorted((knowledge / "runbooks").glob("*.md"))
    notes = sorted((knowledge / "incidents").glob("*.md"))
    assert len(runbooks) >= 10 and len(notes) >= 3
    for path in runbooks:
        text = path.read_text(encoding="utf-8")
        for section in ("## 症状", "## 排查步骤", "## 处置", "## 注意事项"):
            assert section in text, f"{path.name} has no {section}"


def test_routine_changes_are_timed_from_the_anchor(tmp_path: Path) -> None:
    (tmp_path / "services.json").write_text(json.dumps({
        "history_minutes": 60,
        "metrics": {"cpu_usage_percent": {"unit": "percent"}},
        "services": [{"name": "a-svc", "hosts": ["h1"], "metrics": {"cpu_usage_percent": {"baseline": 10}},
                      "changes": [{"minutes_ago": 5, "kind": "config", "summary": "x 1 -> 2", "author": "ann"},
                                  {"minutes_ago": 500, "kind": "deploy", "summary": "older than the history", "author": "bo"}]}],
    }))
    url = f"sqlite:///{tmp_path / 'e.db'}"
    assert load_estate(url, tmp_path, anchor=ANCHOR)["change_records"] == 1
    assert _rows(url)["change_record"] == [("a-svc", ANCHOR - timedelta(minutes=5), "config", "x 1 -> 2")]
