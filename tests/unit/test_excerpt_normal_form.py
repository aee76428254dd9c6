"""The fast normal form (one regex pass for spaces, an ASCII shortcut, a regex instead of
str.translate) is the same function as the straightforward sequential definition below."""

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.excerpt_match import _PUNCT_TABLE, normalize_for_match

_CJK = r"\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TABLE = str.maketrans(_PUNCT_TABLE)
_FORMAT = re.compile(r"[\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")


def reference_normal_form(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _FORMAT.sub("", text)
    text = unicodedata.normalize("NFKC", text.translate(_TABLE).casefold())
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(rf"(?<=[{_CJK}]) | (?=[{_CJK}])", "", text)
    text = re.sub(r"(?<=[,;:!?()\[\]<>\"']) ", "", text)
    return re.sub(r" (?=[,;:!?()\[\]<>\"'])", "", text)


ALPHABET = (
    "aZ09 ,;:!?()[]<>\"'.%-_=\t\n\u3000\u00a0\u200b\ufeff"
    "ＡＢ１２，：（）％。、“”‘’【】《》—–…⋯·ßİ"
    "支付服务超时连接池耗尽 한국어"
    "\x1c\x1f\u2028\u2029\u0301"
)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=60))
def test_fast_normal_form_equals_the_sequential_definition(text):
    assert normalize_for_match(text) == reference_normal_form(text)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40))
def test_equal_on_arbitrary_unicode(text):
    assert normalize_for_match(text) == reference_normal_form(text)


def test_examples():
    assert normalize_for_match("  CPU  使用率 ： 92％ ") == "cpu使用率:92%"
    assert normalize_for_match("upstream ， timeout") == "upstream,timeout"
    assert normalize_for_match("a  b\tc") == "a b c"
