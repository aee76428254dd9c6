"""Excerpt support: what normalisation forgives, and that digits and letters are never loosened."""

import pytest

from shared.core.excerpt_match import (
    bounded_window,
    excerpt_length,
    excerpt_supported,
    normalize_for_match,
)

TEXT = "2026-11-29T10:35:00Z payment-service cpu_usage=92%, 持续 5 分钟 (pod payment-7f9c-3 restarts=3)"


@pytest.mark.parametrize(
    "excerpt",
    [
        "cpu_usage=92%",
        "CPU_USAGE=92%",  # case
        "cpu_usage＝92％",  # full-width = and %
        "cpu_usage=92%，持续　5　分钟",  # Chinese comma and ideographic spaces
        "cpu_usage=92%,持续5分钟",  # spacing beside CJK is not meaningful
        "payment-service   cpu_usage=92%",  # whitespace runs
        "payment-service\ncpu_usage=92%",
        "payment-service … 持续 5 分钟",  # ellipsis fragments in order
        "payment-service ... restarts=3",
        "cpu_u\u200bsage=92%",  # zero-width space is invisible
        "（pod payment-7f9c-3",  # full-width parenthesis
        "3 restarts=3".replace("3 restarts", "payment-7f9c-3 restarts"),  # digit after a hyphen in a name
    ],
)
def test_supported_excerpts(excerpt):
    assert excerpt_supported(excerpt, TEXT)


@pytest.mark.parametrize(
    "excerpt",
    [
        "cpu_usage=29%",  # changed digits
        "cpu_usage=93%",
        "持续 5 分钟 … cpu_usage=92%",  # fragments out of order
        "paymеnt-service",  # Cyrillic е (U+0435) looks like Latin e
        "cpu_usage=92 %s",
        "restarts=30",
        "",
        "   ",
        "...",
    ],
)
def test_unsupported_excerpts(excerpt):
    assert not excerpt_supported(excerpt, TEXT)


@pytest.mark.parametrize(
    ("excerpt", "text"),
    [
        ("92%", "cpu 192%"),  # a digit run cannot match inside a longer one
        ("92%", "cpu 0.92%"),
        ("92", "cpu 92.5"),
        ("5%", "change -5%"),  # a sign is part of the number
        ("29%", "cpu 92%"),
        ("1,234", "total 11,234"),
        (".5% up", "cpu 92.5% up"),
        ("cpu 92.", "cpu 92.5"),
    ],
)
def test_digits_are_never_loosened(excerpt, text):
    assert not excerpt_supported(excerpt, text)


def test_number_boundaries_still_allow_exact_numbers():
    assert excerpt_supported("92%", "cpu 92% now")
    assert excerpt_supported("0.92%", "cpu 0.92%")
    assert excerpt_supported("5%", "change 5%")


def test_later_occurrence_is_found_when_the_first_is_inside_a_number():
    assert excerpt_supported("92%", "192% then 92%")


def test_normal_form_maps_chinese_punctuation_to_ascii():
    assert normalize_for_match("延迟：1500ms。【告警】“超时”") == '延迟:1500ms.[告警]"超时"'


def test_excerpt_length_counts_substance_only():
    assert excerpt_length("92%") == 3
    assert excerpt_length("cpu … 92%") == 6
    assert excerpt_length("  ") == 0


def test_bounded_window_keeps_short_text_and_centres_long_text_on_the_excerpt():
    assert bounded_window("short text", "short", 200) == "short text"
    long_text = "x" * 5000 + " payment-service cpu_usage=92% " + "y" * 5000
    window = bounded_window(long_text, "CPU_USAGE＝92％", 300)
    assert len(window) == 300
    assert "cpu_usage=92%" in window


def test_bounded_window_does_not_settle_for_a_number_cut_at_its_edge():
    # "92%" at index 300 is the tail of "192%"; a window starting there must not be chosen.
    text = "a" * 299 + "192% " + "b" * 3000 + " cpu 92% " + "c" * 3000
    window = bounded_window(text, "92%", 300)
    assert "cpu 92%" in window
