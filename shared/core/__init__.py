"""The domain core: code more than one service runs.

Each service (and the gateway) is deployed on its own and imports only `shared/` (this package
included), never another service. What two of them need — the tool catalogue the planner plans
with and the executor runs, the embedded planner both run, the guard violation codes the executor
repairs against and the gatekeeper reports, the answer templates the composer and the gateway
render, the stop reasons the executor reports and the gateway reads — lives here.
`tests/unit/test_import_boundaries.py` fails on any import across those boundaries.
"""
