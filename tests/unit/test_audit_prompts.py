"""The run audit's `prompt_audit`: every role is named with the prompts it
described for the run's mode, overridden by what the run's calls reported; a role that could not
be asked is `unknown`, one the mode does not call `unused` — never a guessed `*.embedded`."""

from __future__ import annotations

from attest.common.v1 import audit_pb2
from gateway.audit import RunAudit, described_prompts_for_run
from shared.core.contracts import PromptRef

MULTI_AGENT = {
    "planner": [PromptRef(role="planner", name="planner.embedded", version="1")],
    "executor": [PromptRef(role="executor", name="executor_v2", version="4")],
    "verifier": [PromptRef(role="verifier", name="verifier_v2", version="3")],
    "composer": [PromptRef(role="composer", name="composer", version="1")],
}


def _audit(described=None) -> RunAudit:
    return RunAudit(runs=None, run_id="r1", emit=lambda *args: None,  # type: ignore[arg-type]
                    described_prompts=None if described is None else (lambda: described))


def _named(audit: RunAudit) -> list[tuple[str, str, str]]:
    return [(p["role"], p["name"], p["version"]) for p in audit.verifier_evaluation()["prompt_audit"]["prompts"]]


def test_a_run_that_reached_no_role_names_the_described_prompts():
    assert _named(_audit(MULTI_AGENT)) == [
        ("planner", "planner.embedded", "1"), ("executor", "executor_v2", "4"),
        ("verifier", "verifier_v2", "3"), ("composer", "composer", "1"),
    ]


def test_a_role_that_could_not_be_asked_is_unknown_never_embedded():
    described = {**MULTI_AGENT, "verifier": None}
    assert ("verifier", "unknown", "-") in _named(_audit(described))
    # Without any description (no servicer around the run) every role not heard from is unknown.
    assert _named(_audit()) == [(role, "unknown", "-") for role in ("planner", "executor", "verifier", "composer")]


def test_reported_prompts_override_the_description():
    audit = _audit({**MULTI_AGENT, "verifier": None})
    audit.prompt(audit_pb2.PromptRef(role="executor", name="executor_v2", version="4"))  # a newer file, same prompt
    audit.prompt(audit_pb2.PromptRef(role="verifier", name="verifier_v2", version="3"))  # reached: no longer unknown
    audit.prompt(audit_pb2.PromptRef(role="composer", name="composer.templates", version="1"))  # a template answer
    assert _named(audit) == [
        ("planner", "planner.embedded", "1"), ("executor", "executor_v2", "4"),
        ("verifier", "verifier_v2", "3"), ("composer", "composer.templates", "1"),
    ]


def test_single_react_names_each_prompt_of_a_role_and_the_roles_it_does_not_call():
    described = {
        "planner": [],
        "executor": [PromptRef(role="executor", name="react_agent", version="3"),
                     PromptRef(role="executor", name="draft_repair", version="1")],
        "verifier": [PromptRef(role="semantic_guard", name="semantic_guard", version="1")],
        "composer": [],
    }
    audit = _audit(described)
    audit.prompt(audit_pb2.PromptRef(role="executor", name="react_agent", version="3"))
    audit.prompt(audit_pb2.PromptRef(role="semantic_guard", name="semantic_guard", version="1"))
    assert _named(audit) == [
        ("planner", "unused", "-"), ("executor", "react_agent", "3"), ("executor", "draft_repair", "1"),
        ("semantic_guard", "semantic_guard", "1"), ("composer", "unused", "-"),
    ]


def test_a_role_reporting_a_prompt_it_did_not_describe_is_named_by_its_reports():
    """Its configuration changed since it was asked: the description no longer holds."""
    audit = _audit({**MULTI_AGENT, "executor": [PromptRef(role="executor", name="react_agent.embedded", version="1"),
                                                 PromptRef(role="executor", name="draft_repair.embedded", version="1")]})
    audit.prompt(audit_pb2.PromptRef(role="executor", name="react_agent", version="3"))
    assert [p for p in _named(audit) if p[0] == "executor"] == [("executor", "react_agent", "3")]


def test_the_servicer_hands_the_run_its_described_prompts():
    """The graph builds the RunAudit; the servicer sets the run's described prompts around it."""
    with described_prompts_for_run(lambda: MULTI_AGENT):
        inside = RunAudit(runs=None, run_id="r1", emit=lambda *args: None)  # type: ignore[arg-type]
    outside = RunAudit(runs=None, run_id="r2", emit=lambda *args: None)  # type: ignore[arg-type]
    assert ("verifier", "verifier_v2", "3") in _named(inside)
    assert ("verifier", "unknown", "-") in _named(outside)


def test_the_description_is_read_once_when_the_audit_is_written():
    reads = []

    def described():
        reads.append(1)
        return MULTI_AGENT

    audit = RunAudit(runs=None, run_id="r1", emit=lambda *args: None,  # type: ignore[arg-type]
                     described_prompts=described)
    assert reads == [], "building the audit waits for no role"
    audit.prompt_audit()
    audit.prompt_audit()
    assert reads == [1]
