"""The demo's incidents asked the way an on-call SRE asks, through the six real services in both
modes: the answer's opening names the cause the cited evidence holds — the release, the config key,
the expired certificate, the slow carrier — also when asked half an hour after the estate was
loaded (the change then lies further before the question's window).

What each opening must name is the incident's ground truth in `demo/estate/incidents/*.json` (the
change it records, the lines it writes); no rule of the code knows these names
(`tests/unit/test_no_scenario_leak.py` keeps the held-out set out of the code, and the generated
scenario sets change every name with their seed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.launcher import REPO_ROOT
from services.executor.estate import load_estate
from tests.integration.conftest import running_cluster
from tests.integration.failed_call_answers import MODES, conclusion_line, diagnose

pytestmark = pytest.mark.integration

ESTATE = Path(REPO_ROOT) / "demo" / "estate"
# question -> words the opening must hold (each inner tuple: any of them)
CASES = {
    "checkout-api 为什么一直返回 5xx？": [("v3.9.0",)],
    "order-service 的连接池为什么耗尽了？": [("report.export.concurrency",)],
    "media-service 的磁盘为什么满了？": [("media.tmp.cleanup.enabled",)],
    "api-gateway 为什么报错？": [("certificate has expired", "证书过期")],
    "inventory-service 为什么一直重启？": [("v1.22.0",)],
    "shipping-service 为什么超时？": [("carrier=sf",)],
    "settlement-service 消息积压是不是新版本发布导致的？": [("是：",), ("v5.4.0",)],
}


MATRIX = [(minutes, question, mode) for minutes in (0, 30) for question in CASES for mode in MODES]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Callable[[int], str]]:
    """The gateway address of a cluster over the demo estate whose newest point is `minutes` ago
    (each started once, on first use)."""
    with ExitStack() as stack:
        started: dict[int, str] = {}

        def address(minutes: int) -> str:
            if minutes not in started:
                root = tmp_path_factory.mktemp(f"demo-causes-{minutes}")
                running = stack.enter_context(running_cluster(root, otlp_receiver.endpoint, new_database(root)))
                if minutes:
                    anchor = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes)
                    load_estate(f"sqlite:///{root / 'estate.db'}", ESTATE, anchor=anchor)
                started[minutes] = running.gateway_addr
            return started[minutes]

        yield address


@pytest.mark.parametrize(("minutes", "question", "mode"), MATRIX,
                         ids=[f"{m}min-{q.split(' ')[0]}-{mode}" for m, q, mode in MATRIX])
def test_the_opening_names_the_incidents_cause(gateway, auth_metadata, minutes, question, mode):
    response = diagnose(gateway(minutes), question, auth_metadata, MODES[mode])
    opening = conclusion_line(response.answer)
    for alternatives in CASES[question]:
        assert any(word in opening for word in alternatives), (alternatives, response.answer)
    assert not opening.startswith(("原因尚未由证据确认", "无法确认")), response.answer


# A question that asks two things gets two answers: each part by the decision table, in both modes.
COMPOUND = {
    "order-service 的连接池耗尽了吗？CPU 高不高？": ("是：", "另问「order-service CPU 高不高」：证据不支持："),
    "checkout-api 为什么一直返回 5xx？是不是新版本导致的？": ("最可能的原因：", "另问「checkout-api 是不是新版本导致的」：是："),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("question", COMPOUND)
def test_a_compound_question_is_answered_part_by_part(gateway, auth_metadata, question, mode):
    response = diagnose(gateway(0), question, auth_metadata, MODES[mode])
    opening, part = COMPOUND[question]
    conclusion = next(s for s in response.structured_answer.sections if s.title == "结论")
    lines = [item.text for item in conclusion.items]
    assert lines[0].startswith(opening), response.answer
    assert any(line.startswith(part) for line in lines[1:]), response.answer
