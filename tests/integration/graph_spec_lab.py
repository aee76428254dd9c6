"""The lab behind `test_graph_spec_scenarios.py`: one cluster of the six real processes whose
executor and verifier talk to scripted models over real HTTP (`tests/scripted_model_server.py`).

- The executor's model (`ExecutorModel`) makes real tool calls (the planner's suggestions, or the
  calls a scenario asks for), reads the real observations the executor shows it (invocation ids,
  raw paths, texts) and answers with what the scenario builds from them: honest, fabricated,
  mis-cited, malformed.
- The verifier's model (`VerifierModel`) answers, unless a scenario scripts its replies, as the
  shipped embedded verifier would: it reads the verified-only payload it was sent and runs
  `EmbeddedVerifier` on it. So the verifier node runs its real model path (prompt, protocol
  parser, technical attempts, grounding overlay), and every request it got is recorded.

Planner, gatekeeper and composer are the shipped embedded ones. Runs are read back from the real
audit store (`RunStore`, `InvocationStore`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.verifier.embedded_verifier import EmbeddedVerifier
from shared.core.contracts import ToolInvocation, VerifierInput
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.conftest import start_cluster
from tests.scripted_model_server import ScriptedModelServer, Status, completion, tool_call

SERVICE = "payment-service"
QUERY = f"{SERVICE} 最近一小时 CPU 为什么这么高？"
SOURCE_TYPES = {"query_metrics": "metrics", "query_logs": "logs", "query_changes": "changes",
                "lookup_knowledge": "knowledge"}
_SUGGESTED = re.compile(r"^\d+\. (?P<tool>\w+) (?P<arguments>\{.*?\})(?:  \(.*\))?$", re.MULTILINE)


# --- what the executor's model was shown ------------------------------------------------------------


@dataclass
class Observations:
    """The tool observations of one executor conversation, in call order (parsed JSON)."""

    items: list[dict[str, Any]]

    def of(self, tool: str) -> list[dict[str, Any]]:
        return [o for o in self.items if o.get("tool_name") == tool]

    def first(self, tool: str) -> dict[str, Any]:
        found = [o for o in self.of(tool) if o.get("evidence_refs")]
        if not found:
            raise AssertionError(f"HARNESS: no {tool} observation with evidence refs among {self.summary()}")
        return found[0]

    def summary(self) -> list[str]:
        return [f"{o.get('tool_name')}#{o.get('invocation_id')}:{o.get('evidence_status')}" for o in self.items]


def stored_refs(invocation: dict[str, Any]) -> list[dict[str, str]]:
    """The evidence refs of an invocation as GetRun returns it: its view, rendered from the stored
    result (nothing stores the list)."""
    model = ToolInvocation.model_validate(invocation)
    return [ref.model_dump() for ref in evidence_view(model).refs()]


def metric_peak(observations: Observations) -> tuple[dict[str, Any], dict[str, str]]:
    """The query_metrics point ref with the largest value: what a model would cite."""
    observation = observations.first("query_metrics")
    points = [r for r in observation["evidence_refs"] if re.search(r"\.points\[\d+\]$", r["raw_path"])]
    if not points:
        raise AssertionError(f"HARNESS: no metric point among {[r['raw_path'] for r in observation['evidence_refs']]}")
    return observation, max(points, key=lambda r: float(re.search(r"=(-?[\d.]+)", r["text"]).group(1)))


def first_ref(observations: Observations, tool: str, path_prefix: str = "") -> tuple[dict[str, Any], dict[str, str]]:
    observation = observations.first(tool)
    for ref in observation["evidence_refs"]:
        if ref["raw_path"].startswith(path_prefix):
            return observation, ref
    raise AssertionError(f"HARNESS: no {tool} ref under {path_prefix!r}")


def error_log_ref(observations: Observations) -> tuple[dict[str, Any], dict[str, str]]:
    """A query_logs hit at level ERROR (or WARN): a concrete message a claim can quote."""
    observation = observations.first("query_logs")
    for level in (" ERROR ", " WARN "):
        for ref in observation["evidence_refs"]:
            if ref["raw_path"].startswith("hits[") and level in ref["text"]:
                return observation, ref
    raise AssertionError("HARNESS: no ERROR or WARN log line was shown")


def binding(observation: dict[str, Any], ref: dict[str, str], **changes: Any) -> dict[str, Any]:
    """A precise binding citing `ref` verbatim; `changes` overrides (None deletes) fields."""
    tool = observation["tool_name"]
    item: dict[str, Any] = {"source_type": SOURCE_TYPES[tool], "tool_name": tool,
                            "source_invocation_id": observation["invocation_id"],
                            "source_invocation_ids": [observation["invocation_id"]],
                            "raw_path": ref["raw_path"], "evidence_excerpt": ref["text"].removesuffix("…")}
    for key, value in changes.items():
        if value is None:
            item.pop(key, None)
        else:
            item[key] = value
    return item


def claim(claim_id: str, text: str, *bindings: dict[str, Any], claim_type: str = "symptom",
          support_level: str = "direct") -> dict[str, Any]:
    return {"claim_id": claim_id, "claim_type": claim_type, "claim_text": text, "support_level": support_level,
            "evidence_bindings": list(bindings)}


def contract(*claims: dict[str, Any], **fields: Any) -> str:
    """An executor_evidence_v2 output; `fields` adds or (None) removes top-level fields."""
    output: dict[str, Any] = {"answer_version": "executor_evidence_v2", "claims": list(claims), "hypotheses": [],
                              "recommended_actions": [], "missing_info": []}
    for key, value in fields.items():
        if value is None:
            output.pop(key, None)
        else:
            output[key] = value
    return json.dumps(output, ensure_ascii=False)


Answer = Callable[[Observations], str]
Calls = Callable[[list[tuple[str, dict[str, Any]]]], list[tuple[str, dict[str, Any]]]]


class ExecutorModel:
    """The executor's scripted model. First turn of a round: the tool calls (`calls`, by default
    the planner's suggestions); next turn: the round's answer, built from what it was shown."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.calls: Calls = lambda suggested: suggested
        self.shown: list[Observations] = []
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def begin(self, answers: list[Answer], calls: Calls | None) -> None:
        self.answers = list(answers)
        self.calls = calls or (lambda suggested: suggested)
        self.shown, self.requests, self.errors = [], [], []

    def __call__(self, body: dict[str, Any]):
        self.requests.append(body)
        tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_messages:
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            suggested = [(m["tool"], json.loads(m["arguments"])) for m in _SUGGESTED.finditer(user)]
            calls = self.calls(suggested)
            return completion(tool_calls=[tool_call(name, arguments) for name, arguments in calls])
        observations = Observations([json.loads(m["content"]) for m in tool_messages])
        self.shown.append(observations)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        try:
            return completion(answer(observations))
        except Exception as exc:  # noqa: BLE001 - a harness problem, reported as such by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return Status(500, {"error": {"message": f"harness: {exc}"}})


VerifierReply = Callable[[dict[str, Any]], Any]  # the verified-only payload -> reply text or Status


def embedded_reply(payload: dict[str, Any]) -> str:
    """What the shipped embedded verifier concludes on this payload, as a model's JSON reply."""
    output = EmbeddedVerifier().verify(VerifierInput.model_validate(payload))
    return json.dumps(output.model_dump(mode="json"), ensure_ascii=False)


class VerifierModel:
    """The verifier's scripted model: the scenario's replies first, then `embedded_reply`."""

    def __init__(self) -> None:
        self.replies: list[VerifierReply] = []
        self.requests: list[dict[str, Any]] = []

    def begin(self, replies: list[VerifierReply]) -> None:
        self.replies, self.requests = list(replies), []

    def __call__(self, body: dict[str, Any]):
        self.requests.append(body)
        payload = json.loads(body["messages"][-1]["content"])
        reply = self.replies.pop(0) if self.replies else embedded_reply
        result = reply(payload)
        return result if isinstance(result, Status) else completion(result)

    @staticmethod
    def payloads(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [json.loads(body["messages"][-1]["content"]) for body in requests]


# --- one diagnosis, and what it left behind ---------------------------------------------------------


@dataclass
class Outcome:
    response: Any  # DiagnoseResponse
    run: dict[str, Any]
    executor_requests: list[dict[str, Any]]
    verifier_requests: list[dict[str, Any]]
    shown: list[Observations]
    stream_events: list[Any] = field(default_factory=list)

    @property
    def evaluation(self) -> dict[str, Any]:
        return self.run["self_evaluation"].get("verifier_evaluation") or {}

    @property
    def gatekeeper(self) -> dict[str, Any]:
        return self.evaluation.get("gatekeeper_result") or {}

    @property
    def verifier_payloads(self) -> list[dict[str, Any]]:
        return VerifierModel.payloads(self.verifier_requests)

    def nodes(self) -> list[str]:
        return [event["node"] for event in self.run["events"]]

    def events(self, node: str, phase: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.run["events"] if e["node"] == node and (phase is None or e["phase"] == phase)]

    @property
    def effective_verdict(self) -> str | None:
        return spec_value(enums_pb2.Verdict.DESCRIPTOR, self.response.effective_verdict)

    @property
    def verdict_ceiling(self) -> str | None:
        return spec_value(enums_pb2.Verdict.DESCRIPTOR, self.response.verdict_ceiling)

    @property
    def fallback_type(self) -> str | None:
        return spec_value(enums_pb2.FallbackType.DESCRIPTOR, self.response.fallback_type)

    def fallback_event(self) -> dict[str, Any]:
        found = self.events("fallback")
        assert found, f"no fallback event: {self.nodes()}"
        return found[0]


class Lab:
    """One cluster for the module; diagnoses run one at a time (the scripts are shared state)."""

    def __init__(self, running: Any, executor: ExecutorModel, verifier: VerifierModel,
                 metadata: list[tuple[str, str]]) -> None:
        self.running = running
        self.executor = executor
        self.verifier = verifier
        self.metadata = metadata
        self._engine = make_engine(running.database_url)
        self.sessions = sessions = make_session_factory(self._engine)
        self.runs = RunStore(sessions)
        self.invocations = InvocationStore(sessions)
        self._lock = threading.Lock()
        self._cache: dict[str, Outcome] = {}

    def close(self) -> None:
        self._engine.dispose()

    def once(self, name: str, make: Callable[[], Outcome]) -> Outcome:
        """A diagnosis several tests read: run once per module."""
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def diagnose(self, *answers: Answer, query: str = QUERY, calls: Calls | None = None,
                 verifier_replies: list[VerifierReply] | None = None, session_id: str = "",
                 on_progress: Callable[[Any, int], None] | None = None) -> Outcome:
        """One diagnosis in a fresh session. With `on_progress` it is streamed, and the callback
        sees every progress event (with its index) while the run is still going."""
        with self._lock:
            self.executor.begin(list(answers) or [lambda _: "{}"], calls)
            self.verifier.begin(list(verifier_replies or []))
            request = gateway_pb2.DiagnoseRequest(query=query, session_id=session_id)
            events: list[Any] = []
            with grpc.insecure_channel(self.running.gateway_addr) as channel:
                stub = gateway_pb2_grpc.GatewayServiceStub(channel)
                if on_progress is None:
                    response = stub.Diagnose(request, timeout=90, metadata=self.metadata)
                else:
                    response = None
                    stream_request = gateway_pb2.DiagnoseStreamRequest(query=query, session_id=session_id)
                    for index, event in enumerate(stub.DiagnoseStream(stream_request, timeout=90,
                                                                      metadata=self.metadata)):
                        events.append(event)
                        on_progress(event, index)
                        if event.HasField("result"):
                            response = event.result
                    assert response is not None, "the stream ended without a result"
            assert not self.executor.errors, f"HARNESS: the scripted executor failed: {self.executor.errors}"
            run = self.runs.get_run(response.run_id)
            return Outcome(response, run, list(self.executor.requests), list(self.verifier.requests),
                           list(self.executor.shown), events)


@contextmanager
def open_lab(root: Path, otlp_endpoint: str, database_url: str, metadata: list[tuple[str, str]],
             extra_env: dict[str, str] | None = None) -> Iterator[Lab]:
    """A cluster whose executor and verifier models are the scripted ones above; `extra_env`
    changes the cluster (e.g. a backend that refuses connections)."""
    executor, verifier = ExecutorModel(), VerifierModel()
    with ScriptedModelServer([executor], repeat_last=True) as executor_server, \
            ScriptedModelServer([verifier], repeat_last=True) as verifier_server:
        running = start_cluster(root, otlp_endpoint, {
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": executor_server.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-executor",
            "ATTEST_EXECUTOR_MODEL_API_KEY": "test-key",
            "ATTEST_VERIFIER_MODEL_PROVIDER": "openai",
            "ATTEST_VERIFIER_MODEL_BASE_URL": verifier_server.base_url,
            "ATTEST_VERIFIER_MODEL_MODEL": "scripted-verifier",
            "ATTEST_VERIFIER_MODEL_API_KEY": "test-key",
            "ATTEST_PLANNER_MODEL_PROVIDER": "embedded",
            "ATTEST_COMPOSER_MODEL_PROVIDER": "embedded",
            **(extra_env or {}),
        }, database_url=database_url)
        lab = Lab(running, executor, verifier, metadata)
        try:
            yield lab
        finally:
            lab.close()
            running.stop()
