"""shared.proto_convert gives, for every message type of the contracts, what the json_format
implementation it replaced gave: the same plain dicts (values, types, key order), the same messages,
and an error wherever the old code raised one.

The old implementation (still the module's path for message types its plans do not cover) is
the oracle. Messages are generated from the
descriptors of every generated module under gen/attest, so a new message type is covered without
editing this file.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import SerializeToJsonError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from attest.common.v1 import (
    composer_types_pb2,
    evidence_pb2,
    executor_contract_pb2,
    options_pb2,
    verifier_types_pb2,
)
from attest.gateway.v1 import gateway_pb2
from shared.proto_convert import (
    _is_map,
    json_format_message_to_plain,
    json_format_plain_to_message,
    message_to_plain,
    plain_to_message,
)

# The oracle: the json_format implementation the plans replaced, which the module keeps for the
# message types its plans do not cover.
ref_message_to_plain = json_format_message_to_plain
ref_plain_to_message = json_format_plain_to_message


# --- Every message type of the generated contracts ---------------------------------------------------

_GEN = Path(__file__).resolve().parents[2] / "gen"


def _with_nested(desc: Descriptor):
    if not desc.GetOptions().map_entry:
        yield desc
    for nested in desc.nested_types:
        yield from _with_nested(nested)


def _all_descriptors() -> list[Descriptor]:
    found = []
    for path in sorted((_GEN / "attest").rglob("*_pb2.py")):
        module = importlib.import_module(".".join(path.relative_to(_GEN).with_suffix("").parts))
        for desc in module.DESCRIPTOR.message_types_by_name.values():
            found.extend(_with_nested(desc))
    return found


DESCRIPTORS = _all_descriptors()
MAX_DEPTH = 3


def _cls(desc: Descriptor):
    return message_factory.GetMessageClass(desc)


# --- Generated messages --------------------------------------------------------------------------

_json_leaf = st.none() | st.booleans() | st.text(max_size=6) | st.floats(allow_nan=False, allow_infinity=False)
_json_value = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
# Struct numbers are rarely non-finite: MessageToDict then raises, and so must message_to_plain.
_struct_number = st.floats() | st.sampled_from([float("nan"), float("inf")])
_struct_value = st.recursive(
    st.none() | st.booleans() | st.text(max_size=6) | _struct_number,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_struct_dict = st.dictionaries(st.text(max_size=5), _struct_value, max_size=3)
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
}


def _scalar_strategy(field: FieldDescriptor):
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return st.text(max_size=8)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return st.integers(low, high) | st.sampled_from([0, low, high])
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats() | st.sampled_from([0.0, -0.0, 1.0, float("nan"), float("inf"), float("-inf")])
    if kind == FieldDescriptor.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from(numbers) | st.integers(-3, 40)  # open enums keep unknown numbers
    raise AssertionError(f"a field type the contracts do not use yet: {field.full_name}")


_message_cache: dict[tuple[str, int], Any] = {}


def _value_strategy(field: FieldDescriptor, depth: int):
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name == "google.protobuf.Struct":
            return _struct_dict
        return messages(field.message_type, depth + 1)
    return _scalar_strategy(field)


def messages(desc: Descriptor, depth: int = 0):
    """Random messages of a type, nested messages down to MAX_DEPTH (empty below it)."""
    key = (desc.full_name, depth)
    if key in _message_cache:
        return _message_cache[key]
    cls = _cls(desc)
    if depth >= MAX_DEPTH:
        strategy = st.just(cls())
        _message_cache[key] = strategy
        return strategy
    plans = []
    for field in desc.fields:
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            plans.append((field, "map", st.dictionaries(st.text(max_size=4), _value_strategy(value_field, depth), max_size=3)))
        elif field.is_repeated:
            plans.append((field, "repeated", st.lists(_value_strategy(field, depth), max_size=3)))
        else:
            plans.append((field, "single", _value_strategy(field, depth)))

    @st.composite
    def build(draw):
        message = cls()
        for field, shape, strategy in plans:
            if not draw(st.booleans()):
                continue  # left unset (a later oneof member may replace an earlier one: fine)
            value = draw(strategy)
            _assign(message, field, shape, value)
        return message

    strategy = build()
    _message_cache[key] = strategy
    return strategy


def _assign(message, field: FieldDescriptor, shape: str, value) -> None:
    is_struct = field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name == "google.protobuf.Struct"
    if shape == "map":
        target = getattr(message, field.name)
        for key, item in value.items():
            if field.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif shape == "repeated":
        target = getattr(message, field.name)
        for item in value:
            if is_struct:
                target.add().update(item)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                target.add().CopyFrom(item)
            else:
                target.append(item)
    elif is_struct:
        getattr(message, field.name).SetInParent()
        getattr(message, field.name).update(value)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(message, field.name).SetInParent()
        getattr(message, field.name).MergeFrom(value)
    else:
        setattr(message, field.name, value)


# --- Generated plain inputs, valid and not -----------------------------------------------------------


def _plain_scalar(field: FieldDescriptor):
    """Right values, the coercions json_format accepts, and wrong types."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_ENUM:
        specs = [v.GetOptions().Extensions[options_pb2.spec_value] for v in field.enum_type.values]
        names = [v.name for v in field.enum_type.values]
        # Enums outside the spec (a gateway view, say) have no spec spelling: their names are right.
        right = st.sampled_from([s for s in specs if s] or names)
        odd = st.sampled_from(names + ["", "bogus", 1, 0, True, 2.5])
    elif kind == FieldDescriptor.TYPE_STRING:
        right = st.text(max_size=8)
        odd = st.sampled_from([1, 2.5, True, b"bytes", "\ud800", "a\udc00b"])
    elif kind == FieldDescriptor.TYPE_BOOL:
        right = st.booleans()
        odd = st.sampled_from([0, 1, "true", "false", 1.0])
    elif kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        right = st.integers(low, high)
        odd = st.sampled_from(
            ["42", "-7", " 4", "4.0", "4.5", "1e3", "x", 3.0, 3.5, float("nan"), float("inf"), True, high + 1, low - 1]
        )
    elif kind == FieldDescriptor.TYPE_DOUBLE:
        right = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**60), 2**60)
        odd = st.sampled_from(
            ["NaN", "Infinity", "-Infinity", "nan", "inf", "1.5", " 2 ", "x", True, float("nan"), float("inf"), 10**400]
        )
    else:
        raise AssertionError(f"a field type the contracts do not use yet: {field.full_name}")
    return right | right | odd | _json_leaf


_plain_cache: dict[tuple[str, int], Any] = {}


def _plain_value(field: FieldDescriptor, depth: int):
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name == "google.protobuf.Struct":
            return _struct_dict | _json_value
        return plains(field.message_type, depth + 1) | _json_leaf
    return _plain_scalar(field)


def plains(desc: Descriptor, depth: int = 0):
    """Plain dicts for a message type: mostly right, sometimes None, coerced, wrong or unknown."""
    key = (desc.full_name, depth)
    if key in _plain_cache:
        return _plain_cache[key]
    if depth >= MAX_DEPTH:
        strategy = st.just({})
        _plain_cache[key] = strategy
        return strategy
    entries = {}
    for field in desc.fields:
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            value = st.dictionaries(st.text(max_size=4) | st.sampled_from([0, b"k"]), _plain_value(value_field, depth), max_size=3)
        elif field.is_repeated:
            value = st.lists(_plain_value(field, depth), max_size=3) | st.text(max_size=3)
        else:
            value = _plain_value(field, depth)
        entries[field.name] = st.none() | value | value | value
    strategy = st.fixed_dictionaries(
        {}, optional={**entries, "unknown_key": _json_value, "camelCase": _json_value}
    )
    _plain_cache[key] = strategy
    return strategy


# --- Comparisons -----------------------------------------------------------------------------------


def _outcome(call, *args):
    try:
        return "ok", call(*args)
    except Exception as exc:  # noqa: BLE001 - which error is compared below
        return "raised", exc


def assert_same_plain(got, expected) -> None:
    # repr tells 1 from 1.0, -0.0 from 0.0 and key order apart, which == does not.
    assert got == expected
    assert repr(got) == repr(expected)


def assert_same_message(got, expected) -> None:
    assert got == expected
    assert got.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)


def check_message(message) -> None:
    status, expected = _outcome(ref_message_to_plain, message)
    got_status, got = _outcome(message_to_plain, message)
    assert got_status == status, (got, expected)
    if status == "raised":
        assert type(got) is type(expected) is SerializeToJsonError
        assert str(got) == str(expected)
        return
    assert_same_plain(got, expected)
    check_plain(expected, type(message))


def check_plain(data, cls) -> None:
    status, expected = _outcome(ref_plain_to_message, data, cls)
    got_status, got = _outcome(plain_to_message, data, cls)
    assert got_status == status, (data, got, expected)
    if status == "ok":
        assert_same_message(got, expected)


_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("desc", DESCRIPTORS, ids=lambda d: d.full_name)
def test_message_to_plain_matches_json_format(desc):
    @_SETTINGS
    @given(messages(desc))
    def run(message):
        check_message(message)

    run()


@pytest.mark.parametrize("desc", DESCRIPTORS, ids=lambda d: d.full_name)
def test_plain_to_message_matches_json_format(desc):
    cls = _cls(desc)

    @_SETTINGS
    @given(plains(desc))
    def run(data):
        check_plain(data, cls)

    run()


# --- Edge cases, each checked against the oracle too ----------------------------------------------


def test_unset_optional_fields_are_absent_and_set_ones_present_even_at_default():
    binding = executor_contract_pb2.EvidenceBinding(tool_name="query_logs")
    plain = message_to_plain(binding)
    assert "source_invocation_id" not in plain and "raw_path" not in plain and "source_id" not in plain
    assert plain["source_invocation_ids"] == [] and plain["evidence_excerpt"] == ""
    binding.source_invocation_id = 0
    assert message_to_plain(binding)["source_invocation_id"] == 0
    back = plain_to_message({"source_invocation_id": 0, "raw_path": None}, executor_contract_pb2.EvidenceBinding)
    assert back.HasField("source_invocation_id") and not back.HasField("raw_path")
    check_message(binding)
    check_plain({"source_invocation_id": 0, "raw_path": None}, executor_contract_pb2.EvidenceBinding)


def test_empty_repeated_fields_and_empty_nested_message():
    plan = evidence_pb2.Plan()
    plain = message_to_plain(plan)
    assert plain["services"] == [] and plain["steps"] == [] and "window" not in plain
    assert plain_to_message({"services": [], "window": {}}, evidence_pb2.Plan).HasField("window")
    check_message(plan)
    check_plain({"services": [], "steps": [], "window": {}}, evidence_pb2.Plan)


def test_map_of_messages():
    output = composer_types_pb2.ComposerOutput(answer="a")
    output.sections["summary"].lines.extend(["x", "y"])
    output.sections["empty"].SetInParent()
    plain = message_to_plain(output)
    assert plain["sections"] == {"summary": {"lines": ["x", "y"]}, "empty": {"lines": []}}
    assert plain_to_message(plain, composer_types_pb2.ComposerOutput) == output
    check_message(output)
    check_plain({"sections": {"s": {"lines": ["l"]}, "t": None}}, composer_types_pb2.ComposerOutput)
    check_plain({"sections": {"s": {"lines": ["l"]}, 3: {}}}, composer_types_pb2.ComposerOutput)
    with pytest.raises((json_format.ParseError, TypeError)):
        plain_to_message({"sections": {b"s": {"lines": ["l"]}}}, composer_types_pb2.ComposerOutput)
    check_plain({"sections": {b"s": {"lines": ["l"]}}}, composer_types_pb2.ComposerOutput)


def test_struct_with_nested_values():
    request = {"query": "up", "window": {"minutes": 15, "steps": [1, "x", None, True, {"deep": [[]]}]}}
    invocation = plain_to_message({"invocation_id": 7, "request": request}, evidence_pb2.ToolInvocation)
    plain = message_to_plain(invocation)
    # Struct numbers are doubles: 15 comes back 15.0.
    assert plain["request"] == {"query": "up", "window": {"minutes": 15.0, "steps": [1.0, "x", None, True, {"deep": [[]]}]}}
    assert plain["invocation_id"] == 7 and "agent_result" not in plain
    check_message(invocation)
    check_plain({"request": request}, evidence_pb2.ToolInvocation)
    check_plain({"request": {}}, evidence_pb2.ToolInvocation)
    check_plain({"request": ["not", "a", "dict"]}, evidence_pb2.ToolInvocation)
    invocation.request["bad"] = float("nan")
    with pytest.raises(SerializeToJsonError):
        message_to_plain(invocation)
    check_message(invocation)


def test_enum_spellings():
    claim = plain_to_message({"claim_type": "bogus", "support_level": "direct"}, executor_contract_pb2.Claim)
    assert claim.claim_type == 0 and claim.support_level == 1
    assert message_to_plain(claim)["claim_type"] is None
    assert message_to_plain(executor_contract_pb2.Claim(claim_type=99))["claim_type"] is None  # unknown number
    assert message_to_plain(executor_contract_pb2.Claim(claim_type=4))["claim_type"] == "root_cause"
    check_plain({"claim_type": "CLAIM_TYPE_ROOT_CAUSE"}, executor_contract_pb2.Claim)
    check_message(executor_contract_pb2.Claim(claim_type=99))


def test_doubles_and_integers_as_json_format_reads_and_prints_them():
    response = gateway_pb2.DiagnoseResponse(groundedness_score=float("nan"))
    assert message_to_plain(response)["groundedness_score"] == "NaN"
    response.groundedness_score = float("-inf")
    assert message_to_plain(response)["groundedness_score"] == "-Infinity"
    response.groundedness_score = 1.0
    assert repr(message_to_plain(response)["groundedness_score"]) == "1.0"
    coerced = plain_to_message(
        {"groundedness_score": 1, "rounds": "3", "effective_verdict": "PASS"}, gateway_pb2.DiagnoseResponse
    )
    assert coerced.groundedness_score == 1.0 and coerced.rounds == 3 and coerced.effective_verdict == 1
    assert math.isinf(plain_to_message({"groundedness_score": "Infinity"}, gateway_pb2.DiagnoseResponse).groundedness_score)
    for bad in (
        {"rounds": "three"}, {"rounds": " 4"}, {"rounds": 2.5}, {"rounds": True}, {"answer": 5}, {"answer": b"bytes"},
        {"groundedness_score": float("nan")}, {"groundedness_score": "nan"},
    ):
        with pytest.raises((json_format.ParseError, TypeError, ValueError)):
            plain_to_message(bad, gateway_pb2.DiagnoseResponse)
        check_plain(bad, gateway_pb2.DiagnoseResponse)


def test_oneof_given_twice_is_refused_and_once_is_kept():
    check_plain({"event": {"kind": "k"}, "result": {"answer": "a"}}, gateway_pb2.DiagnoseStreamResponse)
    with pytest.raises(json_format.ParseError):
        plain_to_message({"event": {"kind": "k"}, "result": {}}, gateway_pb2.DiagnoseStreamResponse)
    streamed = plain_to_message({"event": None, "result": {"answer": "a"}}, gateway_pb2.DiagnoseStreamResponse)
    assert streamed.WhichOneof("payload") == "result"
    assert message_to_plain(streamed) == {"result": ref_message_to_plain(streamed)["result"]}


def test_pydantic_model_input_is_dumped_as_json():
    class Window(BaseModel):
        start: str
        end: str | None = None

    window = plain_to_message(Window(start="10:00"), evidence_pb2.TimeWindow)
    assert window == evidence_pb2.TimeWindow(start="10:00")
    check_plain(Window(start="10:00"), evidence_pb2.TimeWindow)


@pytest.mark.parametrize("levels", range(46, 51))
@pytest.mark.parametrize("leaf", ["leaf", {}, []], ids=["string", "dict", "list"])
def test_nesting_deeper_than_json_format_allows_is_refused_at_the_same_depth(levels, leaf):
    # ParseDict counts every message level (Struct, Value, ListValue included) up to 100.
    deep: Any = leaf
    for _ in range(levels):
        deep = {"d": deep}
    check_plain({"request": deep}, evidence_pb2.ToolInvocation)
    check_plain({"request": {"l": [deep]}}, evidence_pb2.ToolInvocation)
    # One message level more, so that the innermost Struct lands on the limit too.
    check_plain({"event": {"details": deep}}, gateway_pb2.DiagnoseStreamResponse)
    check_plain({"event": {"details": {"l": [deep]}}}, gateway_pb2.DiagnoseStreamResponse)


def test_deep_struct_is_refused():
    deep: Any = "leaf"
    for _ in range(60):
        deep = {"d": deep}
    with pytest.raises(json_format.ParseError):
        plain_to_message({"request": deep}, evidence_pb2.ToolInvocation)


def test_realistic_verifier_input_round_trips():
    data = {
        "diagnosis_context": {"query": "why slow", "services": ["payment"], "window": {"start": "a", "end": "b"}, "round": 1},
        "verified_executor_output": {
            "answer_version": "v2",
            "claims": [
                {
                    "claim_id": f"c{i}",
                    "claim_type": "observation",
                    "claim_text": "cpu high",
                    "support_level": "direct",
                    "evidence_bindings": [{"tool_name": "query_metrics", "source_invocation_id": 3, "raw_path": "m0"}],
                }
                for i in range(5)
            ],
        },
        "verified_evidence": [{"claim_id": "c0", "source_invocation_id": "3", "tool_name": "query_metrics"}],
        "gatekeeper_audit": {"status": "pass", "rules": [{"id": "R1", "parameters": {"limit": 3, "on": True}}]},
        "verdict_ceiling": "PASS",
    }
    check_plain(data, verifier_types_pb2.VerifierInput)
    check_message(plain_to_message(data, verifier_types_pb2.VerifierInput))


def _fallback_types():
    """Message types with field kinds the plans leave to json_format (bytes, float, Timestamp, maps
    keyed by int), one of them nested in a covered type and holding a covered type in turn."""
    assert timestamp_pb2.Timestamp  # its file must be in the pool before ours
    pool = descriptor_pool.Default()
    name = "proto_convert_test/fallback.proto"
    try:
        pool.FindFileByName(name)
    except KeyError:
        F = descriptor_pb2.FieldDescriptorProto
        file = descriptor_pb2.FileDescriptorProto(
            name=name,
            package="proto_convert_test",
            syntax="proto3",
            dependency=["google/protobuf/timestamp.proto", "google/protobuf/struct.proto", "attest/common/v1/executor_contract.proto"],
        )
        odd = file.message_type.add(name="Odd")
        odd.field.add(name="blob", number=1, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
        odd.field.add(name="ratio", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
        odd.field.add(name="at", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".google.protobuf.Timestamp")
        odd.field.add(name="claim", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".attest.common.v1.Claim")
        odd.field.add(name="counts", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".proto_convert_test.Odd.CountsEntry")
        entry = odd.nested_type.add(name="CountsEntry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
        entry.field.add(name="value", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        holder = file.message_type.add(name="Holder")
        holder.field.add(name="odd", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".proto_convert_test.Odd")
        holder.field.add(name="odds", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".proto_convert_test.Odd")
        holder.field.add(name="label", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        holder.field.add(name="extra", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".google.protobuf.Struct")
        pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("proto_convert_test.Holder")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("proto_convert_test.Odd")),
    )


def test_field_kinds_the_plans_do_not_cover_convert_the_json_format_way():
    holder_cls, odd_cls = _fallback_types()
    odd = odd_cls(blob=b"\x00\xff", ratio=0.1, claim=executor_contract_pb2.Claim(claim_id="c", claim_type=4))
    odd.at.GetCurrentTime()
    odd.counts[3] = "three"
    holder = holder_cls(odd=odd, label="h")
    holder.odds.add().CopyFrom(odd)
    holder.odds.add()
    plain = message_to_plain(holder)
    assert plain["odd"]["claim"]["claim_type"] == "root_cause" and plain["odd"]["blob"] == "AP8="
    check_message(holder)
    check_message(odd)
    check_plain({"odd": {"ratio": "1.5", "counts": {"4": "four"}, "blob": "AP8="}, "odds": [{}, {"claim": {"claim_type": "risk"}}]}, holder_cls)
    check_plain({"odd": {"at": "not a time"}}, holder_cls)
    check_plain({"odd": {"counts": {"x": "y"}}}, holder_cls)
    # Well-known types given as the message itself keep the old (odd) results too.
    check_message(struct_pb2.Struct(fields={"a": struct_pb2.Value(string_value="b")}))
    check_plain({"a": 1}, struct_pb2.Struct)
