"""Service names and partial backends, through the six real services in both modes, against a
Prometheus that knows one service and a Loki (recorded answers in its documented format) that
knows that one and a second, whose name is a single word and which has logs but no metrics:

- the single word is checked like any service the backends know, and answered from its logs;
- a single word the backends do not know is no service: the answer asks which service is meant,
  no tool is called and no service is called unknown;
- the log-only service's missing metric series is never a claim the verifier refutes: one round,
  no retry, no refuted claim capping the verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from attest.common.v1 import enums_pb2
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.conftest import running_cluster
from tests.integration.failed_call_answers import MODES, diagnose
from tests.monitoring_api_server import Guarded, backends_env

pytestmark = pytest.mark.integration

BOTH_MODES = pytest.mark.parametrize("mode", list(MODES))
# The log-only service: one word, known to Loki only.
WORD = "frontend"
# Its recorded lines (offset in seconds before the end of the asked window, level, line).
WORD_LINES = (
    (900, "ERROR", 'level=error msg="render failed: upstream catalog-api timed out after 3000ms" path=/product'),
    (600, "ERROR", 'level=error msg="render failed: upstream catalog-api timed out after 3000ms" path=/cart'),
    (300, "ERROR", 'level=error msg="render failed: upstream catalog-api timed out after 3000ms" path=/product'),
    (120, "WARN", 'level=warn msg="slow upstream response" upstream=catalog-api ms=2400'),
)


def _levels(query: str) -> list[str] | None:
    return query.split('level=~"', 1)[1].split('"', 1)[0].split("|") if 'level=~"' in query else None


def _word_lines(query: str) -> list[tuple[int, str, str]]:
    if f'job="{WORD}"' not in query:
        return []
    levels = _levels(query)
    return [(o, lv, line) for o, lv, line in WORD_LINES if levels is None or lv in levels]


class LokiWithALogOnlyService(Guarded):
    """The recorded Loki of `tests/monitoring_api_server.py`, which also holds WORD's lines."""

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, object]:
        if path == "/loki/api/v1/label/job/values":
            status, body = super().answer(path, params)
            return status, {"status": "success", "data": [*body["data"], WORD]}  # type: ignore[index]
        if path == "/loki/api/v1/query_range" and f'job="{WORD}"' in params.get("query", ""):
            end = int(params["end"])
            result = []
            for level in ("ERROR", "WARN"):
                values = [[str(end - o * 1_000_000_000), line] for o, lv, line in _word_lines(params["query"])
                          if lv == level]
                if values:
                    result.append({"stream": {"job": WORD, "level": level, "pod": f"{WORD}-0"}, "values": values})
            return 200, {"status": "success", "data": {"resultType": "streams", "stats": {}, "result": result}}
        if path == "/loki/api/v1/query" and f'job="{WORD}"' in params.get("query", ""):
            count = len(_word_lines(params["query"]))
            result = [{"metric": {}, "value": [int(params["time"]) / 1e9, str(count)]}] if count else []
            return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
        return super().answer(path, params)


@dataclass
class Lab:
    gateway_addr: str
    runs: RunStore


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    prometheus, loki = Guarded(), LokiWithALogOnlyService()
    root = tmp_path_factory.mktemp("single-word")
    with running_cluster(root, otlp_receiver.endpoint, new_database(root), backends_env(prometheus, loki),
                         (prometheus, loki)) as running:
        yield Lab(running.gateway_addr, RunStore(make_session_factory(make_engine(running.database_url))))


def _ask(lab: Lab, query: str, auth_metadata, mode: str):
    """The gateway's response, the stored run, and its fallback type (None when it answered)."""
    response = diagnose(lab.gateway_addr, query, auth_metadata, MODES[mode])
    return response, lab.runs.get_run(response.run_id), spec_value(enums_pb2.FallbackType.DESCRIPTOR,
                                                                    response.fallback_type)


def _queried(run: dict) -> set[str]:
    return {inv["request"]["service"] for inv in run["invocations"] if inv["request"].get("service")}


# What the verifier says of a claim it does not accept as stated.
NOT_ACCEPTED = ("contradicted", "external_unknown", "unsupported", "overstated")


def _checks(run: dict) -> list[dict]:
    return run["self_evaluation"].get("verifier_evaluation", {}).get("claim_checks") or []


def _one_round(run: dict) -> None:
    assert {i["round"] for i in run["invocations"]} == {0}, "no retry round"
    planner_calls = [e for e in run["events"] if e["node"] == "planner" and e["phase"] == "ENTER"]
    assert len(planner_calls) <= 1, "no retry plan"


@BOTH_MODES
def test_a_single_word_the_backends_know_is_checked_and_answered_from_its_logs(lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(lab, f"{WORD} 最近一小时有什么异常？", auth_metadata, mode)
    answer = response.answer
    assert fallback is None, answer
    assert _queried(run) == {WORD}, run["invocations"]
    coverage = run["self_evaluation"]["verifier_evaluation"]["service_coverage"]
    assert coverage["checked"] == [WORD] and coverage["unknown"] == [], coverage
    assert "catalog-api timed out" in answer and "来源 Loki" in answer.replace("来源：Loki", "来源 Loki"), answer
    assert "没有找到服务" not in answer and "请补充要排查的服务名称" not in answer, answer


@BOTH_MODES
def test_a_log_only_service_is_answered_from_its_logs_in_one_round(lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(lab, f"{WORD} 最近一小时为什么报错？", auth_metadata, mode)
    answer = response.answer
    assert fallback is None, answer
    assert "catalog-api timed out" in answer, answer
    assert [i for i in run["invocations"] if i["tool_name"] == "query_metrics"], "the metrics were asked for"
    _one_round(run)
    assert not [c for c in _checks(run) if c["verification"] in NOT_ACCEPTED], _checks(run)
    assert "可信度：中" not in answer and "可信度：低" not in answer, answer


def test_a_log_only_services_missing_series_is_a_claim_its_verifier_accepts(lab, auth_metadata) -> None:
    """Multi-agent: asked about a signal only metrics carry, the executor states that the service
    has no series; the verifier accepts it as observed (before: a key term of the sentence was
    missing from its evidence and 未查询到 read as health, so it was refuted, retried and capped)."""
    response, run, fallback = _ask(lab, f"{WORD} 的 CPU 高吗？", auth_metadata, "multi_agent")
    assert fallback is None, response.answer
    answer = response.answer
    _one_round(run)
    absent = [c for c in _checks(run) if "没有指标序列（0 series）" in c["claim_text"]]
    assert absent and all(c["verification"] == "direct_observation" for c in absent), _checks(run)
    assert not [c for c in _checks(run) if c["verification"] in NOT_ACCEPTED], _checks(run)
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) == "PASS", answer
    assert f"{WORD} 在" in answer and "没有指标序列（0 series）" in answer, answer
    assert "无法确认" in answer, "the CPU question itself stays unanswered"


def test_single_react_names_the_missing_series_without_a_refusal(lab, auth_metadata) -> None:
    """Single-ReAct: the same question is no validation failure; the missing series is named."""
    response, run, fallback = _ask(lab, f"{WORD} 的 CPU 高吗？", auth_metadata, "single_react")
    react = run["self_evaluation"]["verifier_evaluation"]["single_react"]
    assert fallback in (None, "INSUFFICIENT_EVIDENCE"), response.answer
    assert react["guard"]["passed"], react
    assert react.get("semantic_guard", {}).get("verdict") in (None, "SUPPORTED"), react
    assert "没有指标序列（0 series）" in response.answer, response.answer


@BOTH_MODES
def test_a_single_word_the_backends_do_not_know_is_no_service(lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(lab, "why 最近一小时 error 这么多？", auth_metadata, mode)
    assert fallback == "MISSING_REQUIRED_CONTEXT", response.answer
    assert "请补充要排查的服务名称" in response.answer, response.answer
    assert "没有找到服务" not in response.answer, response.answer
    assert run["invocations"] == []


@BOTH_MODES
def test_words_beside_a_service_name_are_not_services(lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(lab, "pay-svc 最近一小时 error 为什么这么多？why？", auth_metadata, mode)
    assert fallback is None, response.answer
    assert _queried(run) == {"pay-svc"}, run["invocations"]
    coverage = run["self_evaluation"]["verifier_evaluation"]["service_coverage"]
    assert coverage["named"] == ["pay-svc"] and coverage["unknown"] == [], coverage
    assert "没有找到服务" not in response.answer, response.answer
