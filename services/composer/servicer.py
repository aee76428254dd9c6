"""ComposerService: proto in -> Chinese answer -> proto out.

The composer engine is chosen by `model_settings_for("composer")`: the fixed templates (default)
or the model composer, whose output is checked and replaced by the template when it fails. The
response records which path produced the answer (`template`, `used_fallback_template`,
`fallback_reason`), the prompt and the model call. A cancelled caller gets CANCELLED, no answer.
"""

from __future__ import annotations

import logging

import grpc

from attest.common.v1 import composer_types_pb2, enums_pb2
from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from attest.gateway.v1 import answer_pb2
from services.composer.engine import Composer, TemplateComposer
from services.composer.model_composer import ModelComposer
from services.composer.prompts import load_prompt
from shared.config import ModelSettings
from shared.core.contracts import ComposerInput
from shared.model_calls import deadline_budget, model_call_info, prompt_ref_info
from shared.model_client import ModelClient
from shared.proto_convert import message_to_model, plain_to_message, spec_value

log = logging.getLogger(__name__)


def build_composer(settings: ModelSettings, client: ModelClient | None = None) -> Composer:
    """The engine the composer's model settings name: the templates (default) or the model."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai composer needs a model client")
        return ModelComposer(
            client, load_prompt(), max_attempts=settings.max_attempts, json_schema_format=settings.json_schema_format
        )
    return TemplateComposer()


class ComposerServicer(composer_pb2_grpc.ComposerServiceServicer):
    def __init__(self, composer: Composer | None = None) -> None:
        self._composer: Composer = composer if composer is not None else TemplateComposer()

    def ComposeAnswer(
        self, request: composer_pb2.ComposeAnswerRequest, context: grpc.ServicerContext
    ) -> composer_pb2.ComposeAnswerResponse:
        # A caller that went away raises shared.errors.Cancelled: CANCELLED, no answer released.
        run = self._composer.compose(
            message_to_model(request.input, ComposerInput), time_remaining=deadline_budget(context),
            is_active=context.is_active,
        )
        output = run.output
        if output.used_fallback_template:
            log.info("composer used template %s: %s", output.template, output.fallback_reason)
        return composer_pb2.ComposeAnswerResponse(
            output=composer_types_pb2.ComposerOutput(
                answer=output.answer,
                sections={
                    name: composer_types_pb2.SectionLines(lines=lines)
                    for name, lines in output.sections.items()
                },
                template=output.template,
                used_fallback_template=output.used_fallback_template,
                fallback_reason=output.fallback_reason,
            ),
            prompt=prompt_ref_info(run.audit.prompt),
            model_call=model_call_info(run.audit),
            structured_answer=(plain_to_message(output.structured_answer, answer_pb2.StructuredAnswer)
                               if output.structured_answer is not None else None),
        )

    def DescribePrompts(
        self, request: composer_pb2.DescribePromptsRequest, context: grpc.ServicerContext
    ) -> composer_pb2.DescribePromptsResponse:
        """The configured engine's prompt; none in single-ReAct mode, whose Release runs no composer."""
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        engines = [] if mode == "SINGLE_REACT" else [self._composer]
        return composer_pb2.DescribePromptsResponse(
            provider=self._composer.provider,
            prompts=[prompt_ref_info(engine.prompt_ref) for engine in engines],
        )
