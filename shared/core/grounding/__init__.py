"""Deterministic grounding checks: what a model-written sentence may state, given the evidence.

Every check here runs whatever model is configured (embedded or OpenAI-compatible), in the
verifier (claims and side texts), in SemanticGuard (Draft sections) and wherever an answer shows a
model-written sentence. The model is assumed to lie (DESIGN §5); these checks are plain code over
the typed facts of the cited refs (`shared.core.evidence_facts`) and documented lexicons.
"""
