"""ListRuns without a session lists the caller's own runs across its sessions, newest first and
paged, on the gateway's real server (GatewayServicer behind the auth and error interceptors, a
SQLite run store): another principal's runs never appear, whatever page token is sent. No request
here reaches the diagnosis graph; the runs are started in the store as the gateway starts them."""

from __future__ import annotations

import grpc
import pytest

from attest.gateway.v1 import gateway_pb2
from gateway.servicer import GatewayServicer
from shared.config import GatewaySettings

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}


class _NoGraph:
    def run(self, *_args: object, **_kwargs: object) -> None:
        raise AssertionError("ListRuns never runs a diagnosis")


@pytest.fixture()
def gateway(stores, gateway_server):
    runs, _ = stores
    settings = GatewaySettings(port=0, bind_host="127.0.0.1", time_zone="Asia/Tokyo")
    servicer = GatewayServicer(_NoGraph(), runs, settings)  # type: ignore[arg-type]
    with gateway_server(servicer, settings, TOKENS) as (stub, _):
        yield stub, runs


def _as(principal: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[principal]}")]


def _every_page(stub, principal: str, page_size: int, session_id: str = "") -> list[gateway_pb2.ListRunsResponse]:
    pages = [stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=session_id, page_size=page_size), timeout=10,
                           metadata=_as(principal))]
    while pages[-1].next_page_token:
        pages.append(stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=session_id, page_size=page_size,
                                                               page_token=pages[-1].next_page_token),
                                   timeout=10, metadata=_as(principal)))
    return pages


def test_without_a_session_the_caller_gets_its_own_runs_across_sessions_newest_first(gateway):
    stub, runs = gateway
    started: dict[str, list[tuple[str, str]]] = {"alice": [], "bob": []}
    sessions = {"alice": None, "bob": None}
    for n in range(5):
        for principal in ("alice", "bob") if n % 2 else ("bob", "alice"):
            # alice's runs in two sessions: a new one for every other run.
            session = sessions[principal] if n % 2 else None
            session_id, run_id = runs.start_run(session, f"{principal} q{n}", "MULTI_AGENT", principal=principal)
            sessions[principal] = session_id
            started[principal].append((run_id, session_id))
    for principal in ("alice", "bob"):
        pages = _every_page(stub, principal, page_size=2)
        assert [len(page.runs) for page in pages] == [2, 2, 1]
        listed = [run for page in pages for run in page.runs]
        assert [(run.run_id, run.session_id) for run in listed] == started[principal][::-1]
        assert all(run.query.startswith(principal) for run in listed), "only the caller's runs"
        assert len({run.session_id for run in listed}) > 1, "across the caller's sessions"
        assert {page.time_zone for page in pages} == {"Asia/Tokyo"}


def test_a_page_token_cannot_show_another_callers_runs_or_change_the_listing(gateway):
    stub, runs = gateway
    alice_session, _ = runs.start_run(None, "alice q0", "MULTI_AGENT", principal="alice")
    runs.start_run(alice_session, "alice q1", "MULTI_AGENT", principal="alice")
    runs.start_run(None, "bob q0", "MULTI_AGENT", principal="bob")
    alice_first = stub.ListRuns(gateway_pb2.ListRunsRequest(page_size=1), timeout=10, metadata=_as("alice"))
    assert alice_first.next_page_token
    # Bob replaying alice's token gets the runs of his own older than its key: never alice's.
    bob_next = stub.ListRuns(gateway_pb2.ListRunsRequest(page_size=5, page_token=alice_first.next_page_token),
                             timeout=10, metadata=_as("bob"))
    assert all(run.query.startswith("bob") for run in bob_next.runs)
    # A token of the caller's listing is not one of a session's, nor the reverse.
    session_page = stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=alice_session, page_size=1), timeout=10,
                                 metadata=_as("alice"))
    for request in (gateway_pb2.ListRunsRequest(page_token=session_page.next_page_token),
                    gateway_pb2.ListRunsRequest(session_id=alice_session, page_token=alice_first.next_page_token)):
        with pytest.raises(grpc.RpcError) as refused:
            stub.ListRuns(request, timeout=10, metadata=_as("alice"))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in refused.value.details()
    # A session of another caller stays NOT_FOUND, as an absent one.
    with pytest.raises(grpc.RpcError) as refused:
        stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=alice_session), timeout=10, metadata=_as("bob"))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_caller_without_runs_gets_an_empty_list(gateway):
    stub, runs = gateway
    runs.start_run(None, "alice q0", "MULTI_AGENT", principal="alice")
    response = stub.ListRuns(gateway_pb2.ListRunsRequest(), timeout=10, metadata=_as("bob"))
    assert list(response.runs) == [] and response.next_page_token == ""
