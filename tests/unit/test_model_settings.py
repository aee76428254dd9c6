"""Model settings per role: ATTEST_<ROLE>_MODEL_* over ATTEST_MODEL_* over the defaults."""

from __future__ import annotations

import os

import pytest

from shared.config import ModelConfigError, ModelSettings, model_settings_for


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(("ATTEST_", "OTEL_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no developer `.env` is read


def test_defaults_are_the_offline_embedded_engine():
    settings = model_settings_for("executor")
    assert settings == ModelSettings()
    assert settings.provider == "embedded"
    assert settings.api_key is None and settings.base_url is None
    assert settings.json_schema_format is False


def test_role_variables_win_over_global_ones_which_win_over_defaults(monkeypatch):
    monkeypatch.setenv("ATTEST_MODEL_PROVIDER", "openai")
    monkeypatch.setenv("ATTEST_MODEL_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("ATTEST_MODEL_MODEL", "global-model")
    monkeypatch.setenv("ATTEST_MODEL_TIMEOUT_SECONDS", "20")
    monkeypatch.setenv("ATTEST_EXECUTOR_MODEL_MODEL", "executor-model")
    monkeypatch.setenv("ATTEST_EXECUTOR_MODEL_MAX_TOOL_STEPS", "3")
    monkeypatch.setenv("ATTEST_EXECUTOR_MODEL_JSON_SCHEMA_FORMAT", "true")
    monkeypatch.setenv("ATTEST_VERIFIER_MODEL_PROVIDER", "embedded")

    executor = model_settings_for("executor")
    assert executor.provider == "openai"  # global
    assert executor.base_url == "http://127.0.0.1:8080/v1"  # global
    assert executor.model == "executor-model"  # role wins
    assert executor.timeout_seconds == 20.0  # global wins over the default
    assert executor.max_tool_steps == 3 and executor.json_schema_format is True  # role only
    assert executor.max_tokens == ModelSettings.model_fields["max_tokens"].default  # default

    planner = model_settings_for("planner")  # another role sees none of the executor's values
    assert planner.model == "global-model" and planner.max_tool_steps == 6 and planner.json_schema_format is False

    assert model_settings_for("verifier").provider == "embedded"  # a role may opt out


def test_role_values_come_from_dotenv_too(tmp_path):
    (tmp_path / ".env").write_text(
        "ATTEST_MODEL_PROVIDER=openai\nATTEST_MODEL_MODEL=m\nATTEST_COMPOSER_MODEL_TEMPERATURE=0.7\n"
    )
    composer = model_settings_for("composer")
    assert (composer.provider, composer.model, composer.temperature) == ("openai", "m", 0.7)


def test_api_key_is_secret(monkeypatch):
    monkeypatch.setenv("ATTEST_EXECUTOR_MODEL_API_KEY", "sk-very-secret")
    settings = model_settings_for("executor")
    assert settings.api_key.get_secret_value() == "sk-very-secret"
    assert "sk-very-secret" not in repr(settings) and "sk-very-secret" not in str(settings.model_dump())


def test_openai_without_a_model_name_is_refused(monkeypatch):
    monkeypatch.setenv("ATTEST_PLANNER_MODEL_PROVIDER", "openai")
    with pytest.raises(ModelConfigError, match="ATTEST_PLANNER_MODEL_MODEL"):
        model_settings_for("planner")


def test_invalid_values_and_unknown_roles_are_refused(monkeypatch):
    with pytest.raises(ModelConfigError, match="unknown model role"):
        model_settings_for("gatekeeper")  # deterministic: never calls a model
    monkeypatch.setenv("ATTEST_EXECUTOR_MODEL_PROVIDER", "anthropic")
    with pytest.raises(ValueError):
        model_settings_for("executor")
