"""Conversion between protobuf messages and the specs' plain JSON shapes.

Proto enums are named `CLAIM_TYPE_ROOT_CAUSE`; the specs spell the same value `root_cause`. Every
enum value in `protos/attest/common/v1/enums.proto` carries its spec spelling in the
`(attest.common.v1.spec_value)` option, so conversion is generic: no per-field tables to drift.

The conversion reads and writes message fields directly, following a plan computed once per message
type from its descriptor. It gives the results `json_format.MessageToDict` / `ParseDict` gave (the
former implementation, kept as the oracle in tests/unit/test_proto_convert.py), at a fraction of
the cost: json_format is pure Python and was a measured hot spot in every service. A message type
with a field kind the plan does not cover (bytes, float, closed enums, well-known types other than
Struct, maps not keyed by string) is converted the json_format way, so its results stay the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from google.protobuf import json_format, struct_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.json_format import ParseError, SerializeToJsonError
from google.protobuf.message import Message
from pydantic import BaseModel

from attest.common.v1 import options_pb2

if TYPE_CHECKING:
    from google.protobuf.descriptor_pb2 import EnumValueOptions
    from google.protobuf.internal.extension_dict import _ExtensionFieldDescriptor

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=int)
B = TypeVar("B", bound=BaseModel)

_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_INT_TYPES = _INT64_TYPES | {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_SFIXED32,
}
_STRUCT_TYPES = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
_STRUCT = "google.protobuf.Struct"
# ParseDict's default max_recursion_depth: a message nested deeper than this is refused.
_MAX_DEPTH = 100

# `(attest.common.v1.spec_value)`: a string extension of EnumValueOptions. protoc's .pyi declares
# it a bare FieldDescriptor, which the stubs' Extensions mapping does not take as a key.
_SPEC_VALUE_OPTION = cast("_ExtensionFieldDescriptor[EnumValueOptions, str]", options_pb2.spec_value)

_to_spec_cache: dict[str, dict[str, str | None]] = {}
_from_spec_cache: dict[str, dict[str, str]] = {}


def _enum_tables(enum: EnumDescriptor) -> tuple[dict[str, str | None], dict[str, str]]:
    if enum.full_name not in _to_spec_cache:
        to_spec: dict[str, str | None] = {}
        from_spec: dict[str, str] = {}
        for value in enum.values:
            spec = value.GetOptions().Extensions[_SPEC_VALUE_OPTION] or None
            to_spec[value.name] = spec
            if spec is not None:
                from_spec[spec] = value.name
        # from_spec first: _to_spec_cache is the "done" mark other threads test.
        _from_spec_cache[enum.full_name] = from_spec
        _to_spec_cache[enum.full_name] = to_spec
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


def enum_member(enum_type: type[E], spec: str | None) -> E:
    """`enum_number` typed as the generated enum class (`enums_pb2.Verdict`), the type protoc's
    .pyi gives an enum field in a message constructor; at run time the field takes the number."""
    # The generated class's metaclass carries DESCRIPTOR, which a TypeVar bound cannot express;
    # and the number is an instance of the enum class only in the stubs.
    descriptor = cast(EnumTypeWrapper, enum_type).DESCRIPTOR
    return cast(E, enum_number(descriptor, spec))


def _descriptor(message: Message | type[Message]) -> Descriptor:
    # types-protobuf gives DESCRIPTOR as descriptor.Descriptor or upb's Descriptor: two stubs of
    # one interface (at run time it is upb's). This module is written against the first.
    return cast(Descriptor, message.DESCRIPTOR)


def _message_type(field: FieldDescriptor) -> Descriptor:
    """The message type of a message or map field (the descriptor has one exactly then)."""
    if field.message_type is None:
        raise TypeError(f"{field.full_name} is not a message field")
    return field.message_type


def _enum_type(field: FieldDescriptor) -> EnumDescriptor:
    """The enum type of an enum field (the descriptor has one exactly then)."""
    if field.enum_type is None:
        raise TypeError(f"{field.full_name} is not an enum field")
    return field.enum_type


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and _message_type(field).GetOptions().map_entry
    )


def message_to_plain(message: Message) -> dict[str, Any]:
    """A message as the specs' JSON: field names as declared, enums as spec values, int64 as int.

    Fields without presence are always there (defaults included); `optional` and message fields
    only when set. Doubles that are not finite read "NaN", "Infinity" or "-Infinity".
    """
    return _plan(_descriptor(message)).to_plain(message)


def plain_to_message(data: dict[str, Any] | BaseModel, cls: type[M]) -> M:
    """Build a message from the specs' JSON (or a pydantic model); unknown enum values read as 0.

    None values and unknown keys are skipped. Values are coerced as json_format coerces them
    (numeric strings for integers, integers for doubles, "NaN"/"Infinity" for doubles); a value of
    the wrong type raises.
    """
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    message = cls()
    _plan(_descriptor(cls)).fill(message, data, 1)
    return message


def message_to_model(message: Message, model: type[B]) -> B:
    """Validate a message into a pydantic domain model."""
    return model.model_validate(message_to_plain(message))


# --- Plans: per message type, what to read and write for each field --------------------------------

# What to do with a field, one code per layout and value kind, the commonest first.
_SCALAR = 0  # singular, no presence: always printed
_CONVERTED = 1  # the same, its value converted (enum, double)
_PRESENCE = 2  # singular with presence (`optional`, message, oneof member): printed when set
_REPEATED = 3
_MAP = 4
_MESSAGE = 5  # parsing only: a singular message (Struct included)
_REPEATED_MESSAGE = 6
_MAP_MESSAGE = 7


class _Plan:
    """The fields of one message type, each with its converters in both directions.

    out_fields: (name, action, to_plain converter or None for values taken as they are).
    in_fields: (name, action, from_plain converter, oneof name or None); a message converter takes
    (message, value, depth) and fills the message, a scalar one returns the value.
    """

    __slots__ = ("descriptor", "out_fields", "in_fields", "to_plain", "fill")

    def __init__(self, descriptor: Descriptor) -> None:
        self.descriptor = descriptor
        self.out_fields: tuple[tuple[str, int, Callable[[Any], Any] | None], ...] = ()
        self.in_fields: tuple[tuple[str, int, Callable[..., Any], str | None], ...] = ()
        self.to_plain: Callable[[Message], dict[str, Any]] = self._to_plain
        self.fill: Callable[[Message, Any, int], None] = self._fill

    def _to_plain(self, message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        name = ""
        try:
            for name, action, convert in self.out_fields:
                if action == _SCALAR:
                    out[name] = getattr(message, name)
                elif action == _CONVERTED:
                    assert convert is not None  # _build_plan: _CONVERTED exactly when there is a converter
                    out[name] = convert(getattr(message, name))
                elif action == _PRESENCE:
                    if message.HasField(name):
                        value = getattr(message, name)
                        out[name] = value if convert is None else convert(value)
                elif action == _REPEATED:
                    values = getattr(message, name)
                    out[name] = list(values) if convert is None else [convert(v) for v in values]
                else:
                    entries = getattr(message, name)
                    out[name] = (
                        dict(entries.items()) if convert is None
                        else {k: convert(v) for k, v in entries.items()}
                    )
        except ValueError as exc:
            # MessageToDict's wording; only a Struct holding NaN or Infinity gets here.
            raise SerializeToJsonError(f"Failed to serialize {name} field: {exc}.") from exc
        return out

    def _fill(self, message: Message, data: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ParseError(f"Message too deep. Max recursion depth is {_MAX_DEPTH}")
        oneofs_seen: set[str] | None = None
        # data.get per declared field, as the former code did: the same inputs are refused.
        for name, action, convert, oneof in self.in_fields:
            value = data.get(name)
            if value is None:
                continue
            if oneof is not None:
                if oneofs_seen is None:
                    oneofs_seen = set()
                elif oneof in oneofs_seen:
                    raise ParseError(
                        f'Message type "{self.descriptor.full_name}" should not have multiple "{oneof}" oneof fields.'
                    )
                oneofs_seen.add(oneof)
            if action <= _PRESENCE:
                setattr(message, name, convert(value))
            elif action == _MESSAGE:
                sub = getattr(message, name)
                sub.SetInParent()  # an empty dict still sets the field, as ParseDict does
                convert(sub, value, depth + 1)
            elif action == _REPEATED:
                getattr(message, name).extend([convert(item) for item in value])
            elif action == _REPEATED_MESSAGE:
                target = getattr(message, name)
                for item in value:
                    convert(target.add(), item, depth + 1)
            else:
                target = getattr(message, name)
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise ParseError(f"Map field {name} has a key of type {type(key).__name__}, not str")
                    if action == _MAP_MESSAGE:
                        convert(target[key], item, depth + 1)
                    else:
                        target[key] = convert(item)


class _FallbackPlan(_Plan):
    """A message type with a field kind the plan does not cover: converted with json_format."""

    __slots__ = ()

    def __init__(self, descriptor: Descriptor) -> None:
        super().__init__(descriptor)
        self.to_plain = self._to_plain_json
        self.fill = self._fill_json

    def _to_plain_json(self, message: Message) -> dict[str, Any]:
        return json_format_message_to_plain(message)

    def _fill_json(self, message: Message, data: Any, depth: int) -> None:
        json_format.ParseDict(
            _json_from_plain(self.descriptor, data),
            message,
            ignore_unknown_fields=True,
            max_recursion_depth=_MAX_DEPTH + 1 - depth,  # the depth already used by the parents
        )


_plans: dict[str, _Plan] = {}
_plans_lock = threading.RLock()


def _plan(descriptor: Descriptor) -> _Plan:
    plan = _plans.get(descriptor.full_name)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(descriptor.full_name)
            if plan is None:
                building: dict[str, _Plan] = {}
                plan = _build_plan(descriptor, building)
                # Published only when complete: other threads never see a half-built plan.
                _plans.update(building)
    return plan


def _build_plan(descriptor: Descriptor, building: dict[str, _Plan]) -> _Plan:
    known = _plans.get(descriptor.full_name) or building.get(descriptor.full_name)
    if known is not None:
        return known
    if _is_well_known(descriptor) or not all(_covered(field) for field in descriptor.fields):
        plan: _Plan = _FallbackPlan(descriptor)
        building[descriptor.full_name] = plan
        return plan
    plan = _Plan(descriptor)
    # Registered before its fields are planned, so that recursive message types terminate.
    building[descriptor.full_name] = plan
    out_fields = []
    in_fields = []
    for field in descriptor.fields:
        to_plain, from_plain, is_message = _field_converters(field, building)
        if _is_map(field):
            out_action, in_action = _MAP, _MAP_MESSAGE if is_message else _MAP
        elif field.is_repeated:
            out_action, in_action = _REPEATED, _REPEATED_MESSAGE if is_message else _REPEATED
        elif field.has_presence:
            out_action, in_action = _PRESENCE, _MESSAGE if is_message else _PRESENCE
        else:
            out_action = _SCALAR if to_plain is None else _CONVERTED
            in_action = _MESSAGE if is_message else out_action  # (a message field has presence)
        oneof = field.containing_oneof
        # Only a real oneof can be given twice; a proto3 `optional` has a one-field synthetic oneof.
        oneof_name = oneof.name if oneof is not None and len(oneof.fields) > 1 else None
        out_fields.append((field.name, out_action, to_plain))
        in_fields.append((field.name, in_action, from_plain, oneof_name))
    plan.out_fields = tuple(out_fields)
    plan.in_fields = tuple(in_fields)
    return plan


def _is_well_known(descriptor: Descriptor) -> bool:
    return descriptor.file.name.startswith("google/protobuf/")


def _covered(field: FieldDescriptor) -> bool:
    """Whether the plans convert this field's values (a message field's own fields aside)."""
    if _is_map(field):
        key_field = _message_type(field).fields_by_name["key"]
        value_field = _message_type(field).fields_by_name["value"]
        return key_field.type == FieldDescriptor.TYPE_STRING and not _is_map(value_field) and _covered(value_field)
    kind = field.type
    if kind == FieldDescriptor.TYPE_ENUM:
        return not _enum_type(field).is_closed  # json_format refuses unknown numbers of closed enums
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return _message_type(field).full_name == _STRUCT or not _is_well_known(_message_type(field))
    # Not bytes, float or group.
    return kind in _INT_TYPES or kind in (
        FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_DOUBLE
    )


def _field_converters(
    field: FieldDescriptor, building: dict[str, _Plan]
) -> tuple[Callable[[Any], Any] | None, Callable[..., Any], bool]:
    """(to_plain, from_plain, is_message) for the values of a field `_covered` accepts."""
    if _is_map(field):
        return _field_converters(_message_type(field).fields_by_name["value"], building)
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return None, _string_in, False
    if kind == FieldDescriptor.TYPE_BOOL:
        return None, _bool_in, False
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return _double_out, _double_in, False
    if kind == FieldDescriptor.TYPE_ENUM:
        to_plain, from_plain = _enum_converters(_enum_type(field))
        return to_plain, from_plain, False
    if kind == FieldDescriptor.TYPE_MESSAGE:
        if _message_type(field).full_name == _STRUCT:
            return _struct_out, _struct_in, True
        sub = _build_plan(_message_type(field), building)
        return sub.to_plain, sub.fill, True  # final from construction, even while sub is built
    return None, _int_in, False


class _ZeroDefault(dict[str, int]):
    """Spec spelling → enum number; anything else (None, unknown spellings) → 0."""

    def __missing__(self, key: Any) -> int:
        return 0


def _enum_converters(enum: EnumDescriptor) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    to_spec, from_spec = _enum_tables(enum)
    by_number = {number: to_spec[value.name] for number, value in enum.values_by_number.items()}
    by_spec = _ZeroDefault({spec: enum.values_by_name[name].number for spec, name in from_spec.items()})
    # An unknown number (open enum) reads as None, as *_UNSPECIFIED does.
    return by_number.get, by_spec.__getitem__


# --- Scalars: the coercions json_format's parser applies -------------------------------------------


def _string_in(value: Any) -> str:
    if not isinstance(value, str):
        raise ParseError(f"Expected a string, not {type(value).__name__}: {value!r}")
    return value  # lone surrogates are refused by the message itself (UnicodeEncodeError)


def _bool_in(value: Any) -> bool:
    if value is True or value is False:
        return value
    raise ParseError("Expected true or false without quotes")


def _int_in(value: Any) -> int:
    if type(value) is int:
        return value
    # json_format._ConvertInteger: integral floats and numeric strings are accepted, bools are not.
    if isinstance(value, float) and not value.is_integer():
        raise ParseError(f"Couldn't parse integer: {value}")
    if isinstance(value, str) and " " in value:
        raise ParseError(f'Couldn\'t parse integer: "{value}"')
    if isinstance(value, bool):
        raise ParseError(f"Bool value {value} is not acceptable for integer field")
    try:
        return int(value)
    except ValueError as exc:
        try:
            number = float(value)
        except ValueError:
            raise exc from None
        if not number.is_integer():
            raise ParseError(f'Couldn\'t parse non-integer string: "{value}"') from exc
        return int(number)


_NON_FINITE_IN = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _double_in(value: Any) -> float:
    if type(value) is int:
        return float(value)
    # json_format._ConvertFloat: float() of anything (numeric strings, bools included), except
    # non-finite floats, which must come quoted.
    if isinstance(value, float):
        if value - value == 0.0:
            return float(value)
        raise ParseError(f'Couldn\'t parse {value}, use quoted "NaN", "Infinity" or "-Infinity" instead')
    if value == "nan":
        raise ParseError('Couldn\'t parse float "nan", use "NaN" instead')
    try:
        return float(value)
    except ValueError as exc:
        if isinstance(value, str) and value in _NON_FINITE_IN:
            return _NON_FINITE_IN[value]
        raise ParseError(f"Couldn't parse float: {value}") from exc


def _double_out(value: float) -> float | str:
    if value - value == 0.0:
        return value
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


# --- google.protobuf.Struct ------------------------------------------------------------------------


def _struct_out(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {key: _value_out(value) for key, value in struct.fields.items()}


def _value_out(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        if number - number != 0.0:
            raise ValueError(
                f"Fail to serialize {'NaN' if number != number else 'Infinity'} for Value.number_value, "
                "which would parse as string_value"
            )
        return number
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return _struct_out(value.struct_value)
    if kind == "list_value":
        return [_value_out(item) for item in value.list_value.values]
    return None  # null_value or unset


def _struct_in(struct: struct_pb2.Struct, data: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ParseError(f"Message too deep. Max recursion depth is {_MAX_DEPTH}")
    if not isinstance(data, dict):
        raise ParseError(f"Struct must be in a dict which is {data}")
    fields = struct.fields
    for key in data:
        _value_in(fields[key], data[key], depth + 1)


def _value_in(value: struct_pb2.Value, data: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ParseError(f"Message too deep. Max recursion depth is {_MAX_DEPTH}")
    if isinstance(data, dict):
        value.struct_value.SetInParent()
        _struct_in(value.struct_value, data, depth + 1)
    elif isinstance(data, (list, tuple)):
        if depth + 1 > _MAX_DEPTH:
            raise ParseError(f"Message too deep. Max recursion depth is {_MAX_DEPTH}")
        items = value.list_value.values
        value.list_value.SetInParent()
        for item in data:
            _value_in(items.add(), item, depth + 2)
    elif data is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):
        value.bool_value = data
    elif isinstance(data, str):
        value.string_value = data
    elif isinstance(data, (int, float)):
        value.number_value = data
    else:
        raise ParseError(f"Value {data} has unexpected type {type(data)}")


# --- The json_format path, for message types the plans do not cover --------------------------------
# (also the reference the plans are tested against: tests/unit/test_proto_convert.py)


def json_format_message_to_plain(message: Message) -> dict[str, Any]:
    data = json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _plain_from_json(_descriptor(message), data)


def json_format_plain_to_message(data: dict[str, Any] | BaseModel, cls: type[M]) -> M:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    message = cls()
    json_format.ParseDict(_json_from_plain(_descriptor(cls), data), message, ignore_unknown_fields=True)
    return message


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
        value_field = _message_type(field).fields_by_name["value"]
        return {k: _convert_scalar_out(value_field, v) for k, v in value.items()}
    if field.is_repeated:
        return [_convert_scalar_out(field, v) for v in value]
    return _convert_scalar_out(field, value)


def _convert_scalar_out(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        to_spec, _ = _enum_tables(_enum_type(field))
        return to_spec.get(value) if isinstance(value, str) else spec_value(_enum_type(field), value)
    if field.type in _INT64_TYPES:
        return int(value)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if _message_type(field).full_name in _STRUCT_TYPES:
            return value
        return _plain_from_json(_message_type(field), value)
    return value


def _json_from_plain(desc: Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in desc.fields:
        value = data.get(field.name)
        if value is None:
            continue
        if _is_map(field):
            value_field = _message_type(field).fields_by_name["value"]
            out[field.name] = {k: _convert_scalar_in(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_convert_scalar_in(field, v) for v in value]
        else:
            out[field.name] = _convert_scalar_in(field, value)
    return out


def _convert_scalar_in(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_number(_enum_type(field), value)
    if field.type == FieldDescriptor.TYPE_MESSAGE and _message_type(field).full_name not in _STRUCT_TYPES:
        return _json_from_plain(_message_type(field), value)
    return value
