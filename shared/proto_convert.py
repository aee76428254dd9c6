"""Conversion between protobuf messages and the specs' plain JSON shapes.

Proto enums are named `CLAIM_TYPE_ROOT_CAUSE`; the specs spell the same value `root_cause`. Every
enum value in `protos/attest/common/v1/enums.proto` carries its spec spelling in the
`(attest.common.v1.spec_value)` option, so conversion is generic: no per-field tables to drift.
"""

from __future__ import annotations

from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel

from attest.common.v1 import options_pb2

M = TypeVar("M", bound=Message)
B = TypeVar("B", bound=BaseModel)

_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_STRUCT_TYPES = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}

_to_spec_cache: dict[str, dict[str, str | None]] = {}
_from_spec_cache: dict[str, dict[str, str]] = {}


def _enum_tables(enum: EnumDescriptor) -> tuple[dict[str, str | None], dict[str, str]]:
    if enum.full_name not in _to_spec_cache:
        to_spec: dict[str, str | None] = {}
        from_spec: dict[str, str] = {}
        for value in enum.values:
            spec = value.GetOptions().Extensions[options_pb2.spec_value] or None
            to_spec[value.name] = spec
            if spec is not None:
                from_spec[spec] = value.name
        _to_spec_cache[enum.full_name] = to_spec
        _from_spec_cache[enum.full_name] = from_spec
    return _to_spec_cache[enum.full_name], _from_spec_cache[enum.full_name]


def spec_value(enum: EnumDescriptor, number: int) -> str | None:
    """The spec spelling of an enum number; None for *_UNSPECIFIED."""
    to_spec, _ = _enum_tables(enum)
    return to_spec.get(enum.values_by_number[number].name) if number in enum.values_by_number else None


def enum_number(enum: EnumDescriptor, spec: str | None) -> int:
    """The enum number for a spec spelling; 0 (*_UNSPECIFIED) for None or an unknown value."""
    if spec is None:
        return 0
    _, from_spec = _enum_tables(enum)
    name = from_spec.get(spec)
    return enum.values_by_name[name].number if name else 0


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


def _plain_from_json(desc: Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        out[field.name] = _convert_out(field, value)
    return out


def _convert_out(field: FieldDescriptor, value: Any) -> Any:
    if _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        return {k: _convert_scalar_out(value_field, v) for k, v in value.items()}
    if field.is_repeated:
        return [_convert_scalar_out(field, v) for v in value]
    return _convert_scalar_out(field, value)


def _convert_scalar_out(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        to_spec, _ = _enum_tables(field.enum_type)
        return to_spec.get(value) if isinstance(value, str) else spec_value(field.enum_type, value)
    if field.type in _INT64_TYPES:
        return int(value)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name in _STRUCT_TYPES:
            return value
        return _plain_from_json(field.message_type, value)
    return value


def message_to_plain(message: Message) -> dict[str, Any]:
    """A message as the specs' JSON: field names as declared, enums as spec values, int64 as int."""
    data = json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _plain_from_json(message.DESCRIPTOR, data)


def _json_from_plain(desc: Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in desc.fields:
        value = data.get(field.name)
        if value is None:
            continue
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _convert_scalar_in(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_convert_scalar_in(field, v) for v in value]
        else:
            out[field.name] = _convert_scalar_in(field, value)
    return out


def _convert_scalar_in(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_number(field.enum_type, value)
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name not in _STRUCT_TYPES:
        return _json_from_plain(field.message_type, value)
    return value


def plain_to_message(data: dict[str, Any] | BaseModel, cls: type[M]) -> M:
    """Build a message from the specs' JSON (or a pydantic model); unknown enum values read as 0."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    message = cls()
    json_format.ParseDict(_json_from_plain(cls.DESCRIPTOR, data), message, ignore_unknown_fields=True)
    return message


def message_to_model(message: Message, model: type[B]) -> B:
    """Validate a message into a pydantic domain model."""
    return model.model_validate(message_to_plain(message))
