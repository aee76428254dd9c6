"""The OpenAI-compatible composer: a model may rephrase the template answer, never extend it.

The model is given the query (context only), the verdict and the template's sections for that
verdict — which already hold only verifier-allowed material (`templates.template_answer`) — and
must return `{"sections": [{"title", "lines"}]}` with the same titles in the same order. The
reply is checked deterministically (`output_check.check_composed`) against those template lines;
anything it lacks (a number, a service or other name, a citation, a raw path), raw JSON, a removed
executor field, a new causal claim, or on REJECT any cause at all, sends the answer back to the
template, with `used_fallback_template` and `fallback_reason` saying why. So does a failed model
call or a reply that is not that JSON. The verdict line is always the template's.

The first line of 【结论】, the direct answer to the question, is ours in every case: it is
not in the sections the model is given (`TemplateAnswer.sections` holds what may be rephrased;
【结论】 is there only when it has lines after the first), `to_output` puts it back in front of the
model's 【结论】 lines, and a model line that states a direct answer of its own (是：, 证据不支持,
在所查范围内未发现异常 …) is refused (`output_check.ANSWER_PHRASES`). So is 【检查范围】, like
【服务范围】 and 【查询失败】: our data, never given to the model. While an evidence call of the run
failed, a reply that denies an anomaly anywhere (没有异常, 运行正常 …) is refused whatever the
material says: the answer is then the template's. The same holds while a
checked scope had no data (ComposerInput.empty_scopes): no data is not health.

Fallback types (pre-verification and single-ReAct SafeFallbacks) never reach the model: their
fixed safe text is final.
"""

from __future__ import annotations

import json
from typing import Any

from services.composer.engine import ComposeRun, TemplateComposer
from shared.core.contracts import ComposerInput
from shared.core.output_check import MAX_LINE_CHARS, MAX_LINES_PER_SECTION, check_composed
from shared.core.strict_json import NotOneObject, one_json_object
from shared.core.templates import TemplateAnswer, template_answer, to_output
from shared.failed_calls import open_failures
from shared.model_calls import ModelCallAudit, ModelEngine
from shared.model_client import IsActive, ModelCallTally, ModelClient, ModelError, TimeRemaining, complete_with_retries
from shared.prompt_files import Prompt

MAX_REPLY_CHARS = 32 * 1024


class ComposedReplyError(ValueError):
    """The model's reply is not the composer JSON."""


def parse_composed(text: str) -> list[tuple[str, list[str]]]:
    """Exactly one JSON object `{"sections": [{"title": str, "lines": [str]}]}`."""
    if len(text) > MAX_REPLY_CHARS:
        raise ComposedReplyError("reply is too long")
    try:
        data = one_json_object(text)
    except NotOneObject as exc:
        raise ComposedReplyError(str(exc)) from None
    if set(data) != {"sections"} or not isinstance(data["sections"], list):
        raise ComposedReplyError("reply must have exactly the field sections, a list")
    sections: list[tuple[str, list[str]]] = []
    for item in data["sections"]:
        if not isinstance(item, dict) or set(item) != {"title", "lines"}:
            raise ComposedReplyError("each section must have exactly title and lines")
        title, lines = item["title"], item["lines"]
        if not isinstance(title, str) or not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise ComposedReplyError("a section title must be a string and its lines a list of strings")
        sections.append((title, [" ".join(line.split()) for line in lines]))
    return sections


def composer_input_text(query: str, answer: TemplateAnswer) -> str:
    data = {
        "query": query,
        "verdict": answer.verdict,
        "sections": [{"title": title, "lines": lines} for title, lines in answer.sections.items()],
    }
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def composer_response_format(titles: list[str], json_schema_format: bool) -> dict[str, Any]:
    if not json_schema_format:
        return {"type": "json_object"}
    section = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "enum": titles},
            "lines": {
                "type": "array", "minItems": 1, "maxItems": MAX_LINES_PER_SECTION,
                "items": {"type": "string", "maxLength": MAX_LINE_CHARS},
            },
        },
        "required": ["title", "lines"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"sections": {"type": "array", "items": section, "minItems": len(titles), "maxItems": len(titles)}},
        "required": ["sections"],
        "additionalProperties": False,
    }
    return {"type": "json_object", "schema": schema}


class ModelComposer(ModelEngine):
    """`Composer` over a model client; one instance per process, safe across threads."""

    ROLE = "composer"

    def __init__(self, client: ModelClient, prompt: Prompt, *, max_attempts: int = 2,
                 json_schema_format: bool = False) -> None:
        self._client = client
        self._prompt = prompt
        self._max_attempts = max_attempts
        self._json_schema_format = json_schema_format
        self._templates = TemplateComposer()

    @property
    def template_name(self) -> str:
        return f"model:{self._prompt.name}.v{self._prompt.version}"

    def compose(
        self,
        inp: ComposerInput,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> ComposeRun:
        answer = template_answer(inp)
        if answer.fallback_type is not None:
            return self._templates.compose(inp)
        tally = ModelCallTally()

        def run(sections: list[tuple[str, list[str]]] | None = None, fallback_reason: str = "") -> ComposeRun:
            if sections is None:
                output = to_output(answer, used_fallback_template=True, fallback_reason=fallback_reason[:500])
            else:
                output = to_output(answer, dict(sections), template=self.template_name)
            return ComposeRun(output, ModelCallAudit.of_calls(self.prompt_ref, self._client, tally))

        titles = list(answer.sections)
        messages = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": composer_input_text(inp.query, answer)},
        ]
        try:
            # A caller gone before or during the call raises shared.errors.Cancelled: no answer.
            reply = complete_with_retries(
                self._client, messages, tally=tally, max_attempts=self._max_attempts,
                time_remaining=time_remaining, is_active=is_active,
                response_format=composer_response_format(titles, self._json_schema_format),
            )
        except ModelError as error:
            return run(fallback_reason=f"model call failed: {type(error).__name__}: {str(error)[:200]}")
        try:
            sections = parse_composed(reply.content or "")
        except ComposedReplyError as error:
            return run(fallback_reason=f"model output is not the composer JSON: {error}")
        problems = check_composed(sections, answer.sections, answer.verdict or "",
                                  failed=bool(open_failures(inp.failed_calls) or inp.empty_scopes))
        if problems:
            return run(fallback_reason="model output rejected by the output check: " + "; ".join(problems[:3]))
        return run(sections)
