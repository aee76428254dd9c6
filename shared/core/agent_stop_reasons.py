"""Why the single-ReAct agent stopped without a Draft: `RunAgentResponse.stop_reason`, which the
executor sets and the gateway reads ("" is a normal finish)."""

# The step/progress protocol was broken max_violations times (`progress_protocol.py`).
PROGRESS_PROTOCOL_VIOLATED = "PROGRESS_PROTOCOL_VIOLATED"
# The step bound was reached.
STEP_BUDGET_EXHAUSTED = "STEP_BUDGET_EXHAUSTED"
# The run's budget of tool invocations or evidence bytes is used up.
RUN_BUDGET_EXHAUSTED = "RUN_BUDGET_EXHAUSTED"
# The model could not be reached; the gateway answers AGENT_UNAVAILABLE.
MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
