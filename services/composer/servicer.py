"""ComposerService: proto in -> Chinese answer -> proto out.

The composer engine is chosen by `model_settings_for("composer")`: the fixed templates (default)
or the model composer, whose output is checked and replaced by the template when it fails. The
response records which path produced the answer (`template`, `used_fallback_template`,
`fallback_reason`), the prompt and the model call. A cancelled caller gets CANCELLED, no answer.
"""

from __future__ import annotations

import logging

import grpc

from attest.common.v1 import audit_pb2, composer_types_pb2, enums_pb2
from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from services.composer.engine import Composer, TemplateComposer
from services.composer.model_composer import ModelComposer
from services.composer.prompts import load_prompt
from shared.config import ModelSettings
from shared.contracts import ComposerInput
from shared.model_client import ModelClient
from shared.proto_convert import message_to_model, plain_to_message, spec_value

log = logging.getLogger(__name__)
# Time kept back from the caller's deadline so that the response still reaches it.
DEADLINE_HEADROOM_SECONDS = 0.5


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

    def ComposeAnswer(self, request: composer_pb2.ComposeAnswerRequest, context: grpc.ServicerContext):
        def time_remaining() -> float | None:
            value = context.time_remaining()
            return None if value is None else value - DEADLINE_HEADROOM_SECONDS

        # A caller that went away raises shared.errors.Cancelled: CANCELLED, no answer released.
        run = self._composer.compose(
            message_to_model(request.input, ComposerInput), time_remaining=time_remaining, is_active=context.is_active
        )
        output = run.output
        if output.used_fallback_template:
            log.info("composer used template %s: %s", output.template, output.fallback_reason)
        usage = run.usage
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
            prompt=audit_pb2.PromptRef(role=run.prompt.role, name=run.prompt.name, version=run.prompt.version),
            model_call=audit_pb2.ModelCallInfo(
                role="composer", provider=run.provider, model=run.model, attempts=run.attempts,
                token_usage=audit_pb2.TokenUsage(
                    prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                    total_tokens=usage.total_tokens,
                ),
            ),
        )

    def DescribePrompts(self, request: composer_pb2.DescribePromptsRequest, context: grpc.ServicerContext):
        """The configured engine's prompt; none in single-ReAct mode, whose Release runs no composer."""
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        engines = [] if mode == "SINGLE_REACT" else [self._composer]
        return composer_pb2.DescribePromptsResponse(
            provider=self._composer.provider,
            prompts=[plain_to_message(engine.prompt_ref, audit_pb2.PromptRef) for engine in engines],
        )
