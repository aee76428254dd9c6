"""Server reflection under `grpc.reflection.v1` as well as `v1alpha`.

grpcio-reflection 1.85 ships only the v1alpha service, while current clients (grpcurl, Postman,
grpcui) ask v1 first. The two protocols are the same messages with the same field numbers in a
different package, so the v1 service is served by the library's v1alpha servicer: the v1 file
descriptor (the v1alpha one renamed) is added to the default pool, so that reflection can also
describe itself, and the v1 method is routed to the same servicer logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_PACKAGE = "grpc.reflection.v1"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
_V1ALPHA_PACKAGE = "grpc.reflection.v1alpha"


def v1_file_descriptor() -> FileDescriptor:
    """The `grpc.reflection.v1` file in the default descriptor pool, added on first use."""
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE_NAME)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = V1_FILE_NAME
    proto.package = V1_PACKAGE
    proto.options.Clear()
    old, new = f".{_V1ALPHA_PACKAGE}.", f".{V1_PACKAGE}."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old):]
    for service in proto.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old):]
            method.output_type = new + method.output_type[len(old):]
    pool.AddSerializedFile(proto.SerializeToString())
    return pool.FindFileByName(V1_FILE_NAME)


def enable_reflection(service_names: Sequence[str], server: grpc.Server) -> None:
    """Serve reflection v1alpha and v1 for `service_names` plus both reflection services."""
    v1_file_descriptor()
    names = (*service_names, reflection.SERVICE_NAME, V1_SERVICE_NAME)
    servicer = reflection.ReflectionServicer(names)
    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler(reflection.SERVICE_NAME, {
            "ServerReflectionInfo": _stream_handler(servicer),
        }),
        grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {
            "ServerReflectionInfo": _stream_handler(servicer),
        }),
    ))


def _stream_handler(servicer: reflection.ReflectionServicer) -> grpc.RpcMethodHandler[Any, Any]:
    # The wire format of v1 and v1alpha is identical: the v1alpha classes decode either.
    return grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
