"""ComposerService: proto in -> Chinese answer -> proto out."""

from __future__ import annotations

import grpc

from attest.common.v1 import audit_pb2, composer_types_pb2
from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from services.composer.templates import compose_answer
from shared.contracts import ComposerInput
from shared.proto_convert import message_to_model

PROMPT = audit_pb2.PromptRef(role="composer", name="composer.templates", version="1")


class ComposerServicer(composer_pb2_grpc.ComposerServiceServicer):
    def ComposeAnswer(self, request: composer_pb2.ComposeAnswerRequest, context: grpc.ServicerContext):
        output = compose_answer(message_to_model(request.input, ComposerInput))
        return composer_pb2.ComposeAnswerResponse(
            output=composer_types_pb2.ComposerOutput(
                answer=output.answer,
                sections={
                    name: composer_types_pb2.SectionLines(lines=lines)
                    for name, lines in output.sections.items()
                },
                template=output.template,
                used_fallback_template=output.used_fallback_template,
            ),
            prompt=PROMPT,
            model_call=audit_pb2.ModelCallInfo(role="composer", provider="embedded", model="composer.templates", attempts=1),
        )
