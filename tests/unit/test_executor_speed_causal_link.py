"""Property: the causal link's faster text reading gives the results of the code it
replaced. The replaced implementation is kept below as the oracle (copied): a token's shape, a
text's distinctive tokens, its template and the rarity corpus built from them. Each text is read
twice, so a result served from the caches is checked as well as a fresh one. Inputs mix what ref
texts hold (timestamps, versions, key=value pairs, paths, ids, quantities) with what could trip a
shortcut: non-ASCII digits and whitespace, letters that change length or turn ASCII when
lower-cased, Chinese text, and texts past the cached length."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.core.grounding import causal_link
from shared.core.grounding.causal_link import Corpus, distinctive_shapes, shared_identifiers, template_of
from shared.log_templates import MASK_PREFIX, MASK_SUFFIX, MASKING, templates

# --- oracle: the replaced code ---------------------------------------------------------------------

# The patterns the change kept are the module's. Templates are shared/log_templates.py's: the
# oracle applies its masking instructions plainly (no necessary-condition shortcuts, no cache), and
# groups a batch by the set's templates.
_ISO, _RAW_TOKEN, _EDGE = causal_link._ISO, causal_link._RAW_TOKEN, causal_link._EDGE
_VERSION, _QUANTITY, _HEXISH = causal_link._VERSION, causal_link._QUANTITY, causal_link._HEXISH
_DOTTED, _CAMEL = causal_link._DOTTED, causal_link._CAMEL


def oracle_shaped(token: str, original: str) -> bool:
    if len(token) < 2 or (not re.search(r"[a-z]", token) and not _VERSION.match(token)):
        return False
    if _QUANTITY.match(token) or _HEXISH.match(token):
        return False
    if _VERSION.match(token):
        return True
    if "/" in token:
        return token.startswith("/") and token.count("/") >= 2 and bool(re.search(r"[a-z]", token))
    if _DOTTED.match(token):
        return True
    if _CAMEL.search(original):
        return True
    return bool(re.search(r"[a-z]", token)) and bool(re.search(r"[\d_]", token) or re.search(r"[a-z]-[a-z0-9]", token))


def oracle_distinctive_shapes(text: str) -> set[str]:
    found: set[str] = set()
    for raw in _RAW_TOKEN.findall(_ISO.sub(" ", text)):
        original = raw.strip(_EDGE).rstrip("/")
        if "=" not in original:
            if original and oracle_shaped(original.lower(), original):
                found.add(original.lower())
            continue
        key, _, value = original.partition("=")
        value = value.partition("=")[0]  # `a=b=c`: the pair is a=b (the inner key is the value)
        key, value = key.strip(_EDGE), value.strip(_EDGE).rstrip("/")
        key_shaped = bool(key) and oracle_shaped(key.lower(), key)
        value_shaped = bool(value) and oracle_shaped(value.lower(), value)
        if key and value and (key_shaped or value_shaped):
            found.add(f"{key.lower()}={value.lower()}")
        if key_shaped:
            found.add(key.lower())
        if value_shaped:
            found.add(value.lower())
    return found


def oracle_template_of(text: str) -> str:
    for instruction, _ in MASKING:
        text = instruction.mask(text, MASK_PREFIX, MASK_SUFFIX)
    return " ".join(text.split())


def oracle_groups(texts: list[str]) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    for text, template in zip(texts, templates(texts)):
        groups.setdefault(template, set()).update(oracle_distinctive_shapes(text))
    return groups


# --- inputs --------------------------------------------------------------------------------------

PIECES = [
    "2026-11-29T10:00:00Z", "2026-11-29 10:00", "2031-05-06T07:00:00.125+08:00", "2026-11-2910:00", "1999-01-01T00:00-0530",
    "v3.2.0", "V5", "v2.14.0-rc.1", "1.9.4", "1.9", "4.0.2+build.7", "cache.warmup.batch_size", "ruleSet=v5", "RuleSet=V5",
    "shard.map.version=7", "key=", "=value", "=", "a=b=c", "batch_size", "db-01", "shard7", "shard_17", "/srv/data/blobs",
    "/srv/", "/x", "a/b/c", "3000ms", "0.06%", "4.2/s", "+12", "-3.5kb", "deadbeef12", "9f8e7d6c5b4a39281706",
    "0b3c1d2e-4f5a-4b6c-8d7e-9f0a1b2c3d4e", "payment-service", "quill-indexer", "http_5xx_rate=0.06", "camelCase",
    "ABC", "x", "a-", "-a", "_", "-", ".", ":", "/", "#", " ", "  ", "\t", "\n", "\x1c", "\u3000", "\u2028", "\xa0",
    "١٢", "１２", "७", "İ", "K", "ſ", "ǅ", "Σ", "发布", "风控规则集", "：", "「", "」", "host=pay-7f9c-0",
    "traceId=521e351e11073b9d37d6cbf128f7d0eb", "orderId=P815160395", "c.a.payment.api.PayController",
]
texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=20).map("".join),
    st.text(max_size=60),
)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(texts)
@example("x" * 2100 + " ruleSet=v5 2026-11-29T10:00:00Z v3.2.0")  # past the cached length
@example("İstanbul-01 Kelvin=K5 ſtatus=v1")
def test_a_texts_tokens_and_template_are_the_replaced_codes(text: str) -> None:
    for _ in range(2):  # fresh, then from the caches
        assert distinctive_shapes(text) == oracle_distinctive_shapes(text)
        assert template_of(text) == oracle_template_of(text)


def oracle_is_rare(token: str, groups: dict[str, set[str]], excluded: set[str]) -> bool:
    if token in excluded or any(token.startswith(name + ".") for name in excluded):
        return False
    total = len(groups)
    frequency = sum(1 for tokens in groups.values() if token in tokens)
    return 0 < frequency < total and frequency <= max(3, int(total / 3))


@SETTINGS
@given(st.lists(texts, max_size=12), st.lists(st.sampled_from(["payment-service", "Quill-Indexer", "v5", ""]), max_size=2))
@example(["ruleSet=v5 deploy", "ERROR ruleSet=v5 cost=2203ms", "a=b=c", "x.a=b=c.y", "ruleset=V5"] + [f"p{k} cpu=1" for k in range(9)],
         ["payment-service"])
def test_the_corpus_groups_and_rarity_are_the_replaced_codes(batch: list[str], excluded: list[str]) -> None:
    groups = oracle_groups(batch)
    names = {name.lower() for name in excluded if name}
    tokens = sorted(set().union(*groups.values()) | {"v5", "ruleset=v5", "b=c", "a=b=c", "absent"})
    # Rarity first (the corpus reads texts only as a token asks), then the groups in full.
    corpus = Corpus.of(batch, excluded)
    assert [corpus.is_rare(t) for t in tokens] == [oracle_is_rare(t, groups, names) for t in tokens]
    assert [corpus.document_frequency(t) for t in tokens] == [sum(t in g for g in groups.values()) for t in tokens]
    assert corpus.groups == groups and corpus.excluded == names
    if batch:
        expected = sorted((t for t in oracle_distinctive_shapes(batch[0]) & set().union(*map(oracle_distinctive_shapes, batch[1:]))
                           if oracle_is_rare(t, groups, names)), key=lambda t: (-("=" in t), -len(t), t))
        # The same distinctive tokens, in the same order; identifiers that contain one another
        # and shared runs of Chinese (`shared_identifiers`) come on top of them.
        exact = [m.change for m in shared_identifiers(batch[0], batch[1:], Corpus.of(batch, excluded))
                 if m.change == m.signature and m.change in oracle_distinctive_shapes(batch[0])]
        assert exact == expected


@SETTINGS
@given(texts, st.lists(st.sampled_from("0123456789"), min_size=10, max_size=10))
def test_texts_differing_only_in_ascii_digits_share_a_template(text: str, digits: list[str]) -> None:
    """What the corpus relies on when it computes one template per digit-blind key."""
    other = text.translate(str.maketrans("0123456789", "".join(digits)))
    assert oracle_template_of(other) == oracle_template_of(text)
    groups = Corpus.of([text, other, text + " 1"]).groups
    assert groups == oracle_groups([text, other, text + " 1"])


def test_a_distinctive_shapes_result_is_the_callers_own_set() -> None:
    """The cache keeps one reading per text: a caller changing the set it got changes nothing."""
    first = distinctive_shapes("ruleSet=v5 shard.map.version=7")
    first.add("mine")
    first.discard("ruleset")
    assert distinctive_shapes("ruleSet=v5 shard.map.version=7") == oracle_distinctive_shapes("ruleSet=v5 shard.map.version=7")


def test_the_shape_rule_is_the_replaced_codes_for_every_raw_token_shape() -> None:
    """_shaped itself (the shapes' rule, read once per word) on the words of the inputs above."""
    for piece in PIECES:
        for raw in _RAW_TOKEN.findall(piece):
            for word in {raw, raw.strip(_EDGE), *raw.split("=")}:
                assert causal_link._shaped(word.lower(), word) == oracle_shaped(word.lower(), word), word
