"""Versioned prompt files: name and version from the file name (front matter must agree), text
loaded by name, and the audit reference carries name and version only."""

from __future__ import annotations

import pytest

from services.executor.prompts import PROMPT_DIR, load_prompt
from shared.prompt_files import PromptError
from shared.prompt_files import load_prompt as load_from


def test_the_executor_prompt_is_versioned_and_states_the_contract():
    prompt = load_prompt()
    assert (prompt.name, prompt.version) == ("executor_v2", "4")
    assert (PROMPT_DIR / "executor_v2.v4.md").is_file()
    assert not prompt.text.startswith("---")  # front matter is not part of the text
    for needle in ("executor_evidence_v2", "raw_path", "evidence_excerpt", "source_invocation_id",
                   "negative_observation", "missing_info", "diagnosis_summary", "user_facing_answer"):
        assert needle in prompt.text, needle
    assert "do not call any tool" in prompt.fields["final_turn"]
    ref = prompt.ref("executor")
    assert ref.model_dump() == {"role": "executor", "name": "executor_v2", "version": "4"}


@pytest.mark.parametrize("name", ["executor_v2", "react_agent"])
def test_the_model_agents_are_told_to_follow_a_dependency_named_by_an_error_line(name):
    """The model-backed agents choose their own calls; the rule is in their prompts."""
    assert "check X too" in load_prompt(name).text


def test_highest_version_is_loaded_unless_one_is_pinned(tmp_path):
    (tmp_path / "judge.v1.md").write_text("first")
    (tmp_path / "judge.v2.md").write_text("---\nname: judge\nversion: 2\ntone: terse\n---\nsecond\n")
    (tmp_path / "judge_extra.v9.md").write_text("another prompt")
    latest = load_from(tmp_path, "judge")
    assert (latest.version, latest.text, latest.fields) == ("2", "second", {"tone": "terse"})
    assert load_from(tmp_path, "judge.v1").text == "first"


@pytest.mark.parametrize(
    ("file_name", "content", "message"),
    [
        ("judge.v1.md", "---\nversion: 2\n---\ntext", "disagrees"),
        ("judge.v1.md", "---\nname: judge\ntext", "not closed"),
        ("judge.v1.md", "---\n---\n  \n", "empty"),
    ],
)
def test_inconsistent_prompt_files_are_refused(tmp_path, file_name, content, message):
    (tmp_path / file_name).write_text(content)
    with pytest.raises(PromptError, match=message):
        load_from(tmp_path, "judge")


def test_a_missing_prompt_is_an_error(tmp_path):
    with pytest.raises(PromptError, match="no prompt"):
        load_from(tmp_path, "absent")


def test_the_model_paths_get_the_causal_link_rule():
    """The executor and verifier prompts state the rule the code checks."""
    from services.verifier.prompts import load_prompt as load_verifier_prompt

    executor = load_prompt("executor_v2").text
    assert "root_cause" in executor and "distinctive token" in executor and "rollback" in executor
    verifier = load_verifier_prompt("verifier_v2").text
    assert "checkable link" in verifier and "Closeness in time alone never makes a change a" in verifier
