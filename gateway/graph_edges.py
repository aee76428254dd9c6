"""Edge names of the multi-agent diagnosis graph: the spec scenario each conditional edge implements
(chat-verifier-agent.graph.md), so a reader can find the requirement behind a route. The graph
(`gateway/graph.py`) and the steps of its rounds (`gateway/round_steps.py`) route by them."""

EDGE_NO_PLAN = "missing_context_ends_without_tool_calls"
EDGE_UNKNOWN_SERVICE = "unknown_service_ends_without_tool_calls"
EDGE_INVALID_OUTPUT = "executor_output_is_invalid"
EDGE_GATEKEEPER_REJECT = "gatekeeper_reject_bypasses_verifier"
EDGE_VERIFIER_FAILS = "verifier_execution_fails"
EDGE_RETRY = "low_confid_qualifies_for_evidence_retry"
EDGE_TO_COMPOSER = "verdict_routes_to_composer"
EDGE_DOWNSTREAM_FAILURE = "downstream_failure_is_handled"
EDGE_INTERRUPTED = "run_interrupted"
