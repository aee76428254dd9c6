"""Input hygiene at the edge: hidden characters and unknown enum values."""

from __future__ import annotations

import pytest

from attest.common.v1 import enums_pb2
from gateway.request_checks import check_enum, check_identifier, validate_query
from shared.errors import InvalidInput


@pytest.mark.parametrize("char, name", [
    ("\u202e", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    ("\u2066", "U+2066 (LEFT-TO-RIGHT ISOLATE)"),
    ("\u2069", "U+2069 (POP DIRECTIONAL ISOLATE)"),
    ("\u200b", "U+200B (ZERO WIDTH SPACE)"),
    ("\ufeff", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
])
def test_invisible_format_characters_are_refused_with_name_and_position(char, name):
    with pytest.raises(InvalidInput) as refused:
        validate_query(f"pay{char}ment-service 怎么了", 4000)
    message = str(refused.value)
    assert message.startswith("query contains the invisible format character")
    assert name in message and "at position 4" in message


def test_control_characters_are_refused_except_line_breaks_and_tabs_in_a_query():
    assert validate_query("  payment-service\t怎么了？\r\n最近一小时  ", 4000) == "payment-service\t怎么了？\r\n最近一小时"
    with pytest.raises(InvalidInput, match=r"query contains the control character U\+001B .*at position 1"):
        validate_query("\x1b[31mpayment-service", 4000)
    with pytest.raises(InvalidInput, match=r"session_id contains the control character U\+000A"):
        check_identifier("session_id", "abc\n", 128)
    with pytest.raises(InvalidInput, match=r"client_label contains the control character U\+0000"):
        check_identifier("client_label", "web\x00", 200)
    with pytest.raises(InvalidInput, match=r"client_label contains the invisible format character U\+202E"):
        check_identifier("client_label", "\u202eweb", 200)
    with pytest.raises(InvalidInput, match="session_id is 129 characters; the limit is 128"):
        check_identifier("session_id", "a" * 129, 128)


def test_ordinary_text_passes():
    check_identifier("client_label", "web-ui 北京 ✓", 200)
    assert validate_query("为什么 payment-service 的 CPU 这么高？😀", 4000)


@pytest.mark.parametrize("number", [99, -1, 3])
def test_unknown_enum_values_are_refused_naming_the_field_and_the_allowed_values(number):
    with pytest.raises(InvalidInput) as refused:
        check_enum("mode", enums_pb2.DiagnosisMode.DESCRIPTOR, number)
    assert str(refused.value) == (
        f"mode {number} is not a DiagnosisMode; allowed values: DIAGNOSIS_MODE_UNSPECIFIED (0), "
        "DIAGNOSIS_MODE_MULTI_AGENT (1), DIAGNOSIS_MODE_SINGLE_REACT (2)")
    assert check_enum("mode", enums_pb2.DiagnosisMode.DESCRIPTOR, 2) == 2
