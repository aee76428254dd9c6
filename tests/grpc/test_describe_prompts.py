"""DescribePrompts on the four model-backed roles: each role, built by its own
process wiring (`services/<role>/__main__.py: build_servicer`) and served on an ephemeral port,
names the prompts it would send in each diagnosis mode with its configured engine — the embedded
engines' names, or the versioned prompt files a model-configured role loads — without calling
its model."""

from __future__ import annotations

import json

import pytest

from attest.common.v1 import enums_pb2, verifier_types_pb2
from attest.composer.v1 import composer_pb2
from attest.executor.v1 import executor_pb2
from attest.planner.v1 import planner_pb2
from attest.verifier.v1 import verifier_pb2
from services.composer import __main__ as composer_main
from services.composer.prompts import load_prompt as composer_prompt
from services.executor import __main__ as executor_main
from services.executor.prompts import load_prompt as executor_prompt
from services.planner import __main__ as planner_main
from services.planner.prompts import load_prompt as planner_prompt
from services.verifier import __main__ as verifier_main
from services.verifier.prompts import load_prompt as verifier_prompt
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from shared.config import ComposerSettings, ExecutorSettings, ModelSettings, PlannerSettings, VerifierSettings
from shared.proto_convert import plain_to_message
from tests.scripted_model_server import completion
from tests.unit.test_verifier_protocol import make_input, model_output

CALL_TIMEOUT = 10
MULTI_AGENT = enums_pb2.DIAGNOSIS_MODE_MULTI_AGENT
SINGLE_REACT = enums_pb2.DIAGNOSIS_MODE_SINGLE_REACT
UNSPECIFIED = enums_pb2.DIAGNOSIS_MODE_UNSPECIFIED


def _file(load, name: str) -> tuple[str, str]:
    """(name, version) of the prompt file the role loads: its highest version."""
    prompt = load(name)
    return prompt.name, prompt.version


@pytest.fixture()
def serve(tmp_path, serve_role):
    """`serve(role, model_settings)` -> `describe(mode)` -> (provider, [(role, name, version)]) of
    that role, built by its process wiring; `describe.stub` is the role's stub."""

    def start(role: str, model_settings: ModelSettings):
        if role == "planner":
            settings, servicer = PlannerSettings(), planner_main.build_servicer(model_settings, None)
            module = planner_pb2
        elif role == "executor":
            settings = ExecutorSettings(database_url=f"sqlite:///{tmp_path / 'attest.db'}",
                                        estate_database_url=f"sqlite:///{tmp_path / 'estate.db'}")
            servicer = executor_main.build_servicer(settings, model_settings, None)
            module = executor_pb2
        elif role == "verifier":
            settings = VerifierSettings()
            servicer = verifier_main.build_servicer(model_settings, SemanticGuardSettings(), None)
            module = verifier_pb2
        else:
            settings, servicer = ComposerSettings(), composer_main.build_servicer(model_settings, None)
            module = composer_pb2
        stub = serve_role(role, servicer, settings)

        def describe(mode: int) -> tuple[str, list[tuple[str, str, str]]]:
            response = stub.DescribePrompts(module.DescribePromptsRequest(mode=mode), timeout=CALL_TIMEOUT)
            return response.provider, [(p.role, p.name, p.version) for p in response.prompts]

        describe.stub = stub
        return describe

    return start


# --- embedded (the default) ----------------------------------------------------------------------


def test_embedded_roles_name_their_embedded_engines(serve):
    embedded = ModelSettings()
    planner, executor, verifier, composer = (serve(role, embedded) for role in
                                             ("planner", "executor", "verifier", "composer"))
    assert planner(MULTI_AGENT) == ("embedded", [("planner", "planner.embedded", "1")])
    assert executor(MULTI_AGENT) == ("embedded", [("executor", "executor.embedded", "1")])
    assert verifier(MULTI_AGENT) == ("embedded", [("verifier", "verifier.embedded", "1")])
    assert composer(MULTI_AGENT) == ("embedded", [("composer", "composer.templates", "1")])
    # Single-ReAct: the agent and its repair, the SemanticGuard; no planner, no composer.
    assert executor(SINGLE_REACT) == ("embedded", [("executor", "react_agent.embedded", "1"),
                                                   ("executor", "draft_repair.embedded", "1")])
    assert verifier(SINGLE_REACT) == ("embedded", [("semantic_guard", "semantic_guard.embedded", "1")])
    assert planner(SINGLE_REACT) == ("embedded", [])
    assert composer(SINGLE_REACT) == ("embedded", [])
    # An unspecified mode is the default mode, as the gateway reads it.
    for describe in (planner, executor, verifier, composer):
        assert describe(UNSPECIFIED) == describe(MULTI_AGENT)


# --- model-configured roles ------------------------------------------------------------------------


def test_model_roles_name_the_prompt_files_they_load_without_a_model_call(serve, model_server, scripted_settings):
    settings = scripted_settings()
    planner, executor, verifier, composer = (serve(role, settings) for role in
                                             ("planner", "executor", "verifier", "composer"))
    assert planner(MULTI_AGENT) == ("openai", [("planner", *_file(planner_prompt, "planner"))])
    assert executor(MULTI_AGENT) == ("openai", [("executor", *_file(executor_prompt, "executor_v2"))])
    assert verifier(MULTI_AGENT) == ("openai", [("verifier", *_file(verifier_prompt, "verifier_v2"))])
    assert composer(MULTI_AGENT) == ("openai", [("composer", *_file(composer_prompt, "composer"))])
    assert executor(SINGLE_REACT) == ("openai", [("executor", *_file(executor_prompt, "react_agent")),
                                                 ("executor", *_file(executor_prompt, "draft_repair"))])
    assert verifier(SINGLE_REACT) == ("openai", [("semantic_guard", *_file(verifier_prompt, "semantic_guard"))])
    assert planner(SINGLE_REACT) == ("openai", []) and composer(SINGLE_REACT) == ("openai", [])
    # The versions are the files' own: today's highest versions, not the embedded "1".
    assert _file(executor_prompt, "executor_v2")[1] != "1" and _file(verifier_prompt, "verifier_v2")[1] != "1"
    assert model_server.requests == [], "describing the prompts calls no model"


def test_described_prompt_is_the_one_the_role_reports_when_its_model_answers(serve, model_server, scripted_settings):
    describe = serve("verifier", scripted_settings())
    _, described = describe(MULTI_AGENT)
    model_server.add(completion(json.dumps(model_output())))
    response = describe.stub.VerifyClaims(
        verifier_pb2.VerifyClaimsRequest(input=plain_to_message(make_input(), verifier_types_pb2.VerifierInput)),
        timeout=CALL_TIMEOUT,
    )
    assert response.model_call.provider == "openai" and len(model_server.requests) == 1
    assert [(response.prompt.role, response.prompt.name, response.prompt.version)] == described
