"""The domain core: code more than one service runs.

Each service (and the gateway) is deployed on its own and imports only `shared/` (this package
included), never another service. What two of them need lives here: the contracts every message
follows; the tool catalogue the planner plans with and the executor runs; each evidence tool's
typed result, the one renderer of its evidence texts and the one reader of what a ref states
(subject, metric, time, value) the fabrication checks use; the symptom lexicon and the embedded
planner; the verdict rules the verifier applies and the gateway recomputes; the guard violation
codes the executor repairs against and the gatekeeper reports; the answer templates and output
check the composer and the gateway render with; the stop reasons the executor reports and the
gateway reads; the strict reader of model replies.
`tests/unit/test_import_boundaries.py` fails on any import across those boundaries.
"""
