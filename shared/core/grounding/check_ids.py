"""The ids of the deterministic grounding checks, as they appear in claim checks, SemanticGuard
findings, side-text checks and the rejection ledger. One id per kind of lie the checks catch."""

from __future__ import annotations

# A quantity that no cited ref states for the same subject, metric and time (or window).
VALUE_BINDING = "value.binding"
# A comparison or extreme (峰值, 最高, 最低, 高于, 仅为, 翻倍 …) that no cited ref states.
VALUE_COMPARISON = "value.comparison"
# A number in words (三成, 一半, 翻倍 …) not stated by a cited ref, or a quantity word outside the
# closed list (shared/core/grounding/number_words.py).
NUMBER_WORDS = "number.words"
# A vague quantifier (大量, 多次, 明显 …) that its evidence does not support.
NUMBER_VAGUE = "number.vague"
# Absence or health (没有 …, 均正常) without a negative observation over the right scope.
POLARITY_NEGATION = "polarity.negation"
# A universal statement (均在 … 内完成, 始终低于 …) without a summary over the whole scope.
POLARITY_ABSOLUTE = "polarity.absolute"
# A candidate cause excluded (与 X 无关, 不是 X 导致): never a confirmed observation.
POLARITY_EXCLUSION = "polarity.exclusion"
# A key term (name, version, person, noun phrase, event) absent from the cited evidence.
KEY_TERM_ABSENT = "key_term.absent"
# A cause asserted without a hedge that the incident evidence does not state.
CAUSAL_UNHEDGED = "causal.unhedged"
# A cause (a root_cause claim, or causal words the incident evidence does not state) whose cited
# refs do not form a link the deterministic check accepts (shared/core/grounding/causal_link.py: a
# change preceding the onset within the bound and sharing a distinctive token with the error
# signatures, or an error signature coinciding with the onset); a linked cause is at best a
# reasonable inference.
CAUSAL_LINK = "causal.link"
# A series stated as quiet (未见明显升高) whose cited summary shows a rise, or cannot show that
# there was none (shared/core/grounding/quiet_series.py).
QUIET_SERIES = "series.quiet"
# A model-written side text (hypothesis, action, recommendation, limitation) the evidence lacks.
SIDE_TEXT_UNGROUNDED = "side_text.ungrounded"
# Model-written missing info: never shown (gaps come only from the verifier).
SIDE_TEXT_MISSING_INFO = "side_text.missing_info"
# A field of a claim's typed statement (subject, signal, state, quantity, cause, action) that the
# facts of its cited refs do not state (shared/core/statement_facts.py).
STATEMENT_FIELD = "statement.field"
# A state-changing action (删除, 重启, 回滚, 扩缩容 …) without human confirmation.
ACTION_STATE_CHANGE = "action.state_change"

ALL_CHECK_IDS: tuple[str, ...] = (
    VALUE_BINDING, VALUE_COMPARISON, NUMBER_WORDS, NUMBER_VAGUE, POLARITY_NEGATION, POLARITY_ABSOLUTE,
    POLARITY_EXCLUSION, KEY_TERM_ABSENT, CAUSAL_UNHEDGED, CAUSAL_LINK, QUIET_SERIES, SIDE_TEXT_UNGROUNDED,
    SIDE_TEXT_MISSING_INFO, ACTION_STATE_CHANGE, STATEMENT_FIELD,
)
