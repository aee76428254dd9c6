"""`attest`: the command line for people.

    attest ask "为什么 payment-service 的 CPU 这么高?"      answer, verdict, run id, session id, trace id
    attest ask --cite inline "…"                            citations inline as `[证据: …]`, not as footnotes
    attest ask --verbose "…"                                every progress event, one line each
    attest ask --session ID "那它的内存呢？"                a follow-up in that session
    attest ask --request-id KEY "…"                         idempotent: the same KEY again returns that run
    attest ask --json "…"                                   the full response as JSON
    attest runs [--session ID]                              the caller's recent runs (or a session's), newest first
    attest run-show RUN_ID [--json [--full]]                the persisted audit of a run (gateway/cli_runs.py)
    attest --tls-ca CA.pem [--tls-cert C --tls-key K] ask …  a gateway whose public port has TLS (mutual)
    attest purge --older-than DAYS [--dry-run]              delete runs older than DAYS, with their rows

`attest ask` exits 0 for an answer (PASS, LOW_CONFID, a released single-ReAct Draft), 3 for REJECT
or any fallback, 2 for a usage error, 1 when the gateway cannot be reached or refuses the caller.

Offline tools live next to the logic they expose, in a service's package, and are registered in
OFFLINE_COMMANDS. The gateway never imports a service (each is deployed on its own): `attest <cmd>`
runs the tool's module as a child process with the same Python, argv, stdin and stdout, and exits
with its code. Each tool is also a console script of its own (`attest-verdict`, ...).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from importlib.machinery import ModuleSpec

import grpc
from rich.console import Console
from rich.status import Status
from rich.text import Text

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2
from gateway.answer_render import CITE_FOOTNOTES, CITE_STYLES, KEPT_EVENTS, answer_lines, is_fallback
from gateway.cli_connection import bearer_metadata as _metadata
from gateway.cli_connection import fail as _fail
from gateway.cli_connection import gateway_stub as _stub
from gateway.cli_runs import DEFAULT_LIMIT, list_runs, run_show
from gateway.terminal_text import TerminalConsole, clip, printable, terminal_json
from shared.error_details import describe, error_details
from shared.proto_convert import enum_member, message_to_plain, spec_value
from shared.tls import TlsConfigError, channel_credentials

DEFAULT_ADDR = "127.0.0.1:50050"
# name -> (module run with `python -m`, help). Never imported here: see the module docstring.
OFFLINE_COMMANDS: dict[str, tuple[str, str]] = {
    "verdict": ("services.verifier.verdict_cli", "the deterministic effective verdict of a claim-check file"),
    "gatekeeper-check": ("services.gatekeeper.check_cli", "check an executor output file against its invocations, offline"),
    "hash-token": ("gateway.hash_token", "print the ATTEST_AUTH_TOKENS_FILE line of the token on stdin"),
    "purge": ("shared.db.retention", "delete runs older than the retention period (--older-than DAYS, --dry-run)"),
}
# `attest ask`'s exit status: an answer; the gateway unreachable or the caller refused; a usage
# error; no answer (REJECT or a fallback), which a script must not take for one.
EXIT_ANSWER = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_ANSWER = 3


def gateway_credentials(ca_file: str | None, cert_file: str | None, key_file: str | None) -> grpc.ChannelCredentials | None:
    """TLS to a gateway whose public port has a certificate (`--tls-ca`), presenting a client
    certificate when it asks for one (`--tls-cert` and `--tls-key`); None: plaintext. TlsConfigError
    names a file that cannot be used or an option given without its partner."""
    if bool(cert_file) != bool(key_file):
        raise TlsConfigError("--tls-cert and --tls-key go together (a client certificate and its key)")
    if not ca_file:
        if cert_file:
            raise TlsConfigError("--tls-cert needs --tls-ca (the CA that signed the gateway's certificate)")
        return None
    return channel_credentials(ca_file, cert_file or None, key_file or None)


def ask(addr: str, query: str, *, token: str | None = None, mode: str = "MULTI_AGENT",
        timeout: float = 120.0, session_id: str = "", request_id: str = "",
        credentials: grpc.ChannelCredentials | None = None) -> gateway_pb2.DiagnoseResponse:
    channel, stub = _stub(addr, credentials)
    with channel:
        return stub.Diagnose(
            gateway_pb2.DiagnoseRequest(query=query, mode=enum_member(enums_pb2.DiagnosisMode, mode),
                                        session_id=session_id, request_id=request_id),
            timeout=timeout,
            metadata=_metadata(token),
        )


def outcome_status(response: gateway_pb2.DiagnoseResponse) -> int:
    """The exit status of an answered request: EXIT_ANSWER for PASS, LOW_CONFID or a released
    Draft; EXIT_NO_ANSWER for REJECT or any fallback."""
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)
    if is_fallback(response) or verdict == "REJECT":
        return EXIT_NO_ANSWER
    if verdict in ("PASS", "LOW_CONFID") or response.release_outcome == enums_pb2.RELEASE_OUTCOME_SUCCESS:
        return EXIT_ANSWER
    return EXIT_NO_ANSWER


def wrap_width(console: Console) -> int | None:
    """The width to wrap an answer to: the terminal's, or COLUMNS when set; None (one line per
    line of the answer) when writing to a pipe or a file, for the tools that read it."""
    return console.width if console.is_terminal or os.environ.get("COLUMNS") else None


def render(console: Console, query: str, response: gateway_pb2.DiagnoseResponse, *,
           cite: str = CITE_FOOTNOTES, notes_kept: Sequence[str] = ()) -> None:
    # Text objects: the answer quotes evidence as written (`[thread-1]`, `:warning:` in a log line
    # are text, never markup or emoji codes).
    for line in answer_lines(response, query, wrap_width(console), cite, notes_kept):
        console.print(line, highlight=False)


NODE_LABELS = {"planner": "规划", "executor": "取证", "gatekeeper": "引用校验", "verifier": "核验",
               "composer": "撰写", "fallback": "安全回退", "graph": "流程", "gateway": "网关", "release": "发布"}


def progress_line(event: gateway_pb2.ProgressEvent) -> str:
    """One streamed event for a person: its seq, node, round and Chinese message (the English
    developer text only from a gateway that sends no Chinese one)."""
    label = NODE_LABELS.get(event.node, event.node)
    round_note = f"（第 {event.round + 1} 轮）" if event.round > 0 else ""
    seq = f"#{event.seq} " if event.seq else ""
    return f"· {seq}{label}{round_note}: {event.message_zh or event.message}"


def _stream(addr: str, query: str, *, token: str | None, mode: str, timeout: float,
            on_event: Callable[[gateway_pb2.ProgressEvent], None], session_id: str = "",
            request_id: str = "", credentials: grpc.ChannelCredentials | None = None) -> gateway_pb2.DiagnoseResponse:
    channel, stub = _stub(addr, credentials)
    with channel:
        result = None
        for message in stub.DiagnoseStream(
            gateway_pb2.DiagnoseStreamRequest(query=query, mode=enum_member(enums_pb2.DiagnosisMode, mode),
                                              session_id=session_id, request_id=request_id),
            timeout=timeout, metadata=_metadata(token),
        ):
            if message.HasField("event"):
                on_event(message.event)
            else:
                result = message.result
        if result is None:
            raise RuntimeError("the gateway closed the stream without a result")
        return result


def ask_and_print(addr: str, query: str, *, token: str | None = None, as_json: bool = False,
                  mode: str = "MULTI_AGENT", timeout: float = 120.0, session_id: str = "",
                  request_id: str = "", credentials: grpc.ChannelCredentials | None = None,
                  cite: str = CITE_FOOTNOTES, verbose: bool = False) -> int:
    """Ask, print the answer, return the exit status (see the module docstring). Progress: on a
    terminal one line, updated in place and cleared when the answer arrives; with `verbose` every
    event on a line of its own; in a pipe nothing else."""
    console = TerminalConsole(stderr=False, soft_wrap=True)
    token = token if token is not None else os.environ.get("ATTEST_AUTH_TOKEN") or None
    notes_kept: list[str] = []
    try:
        if as_json:
            response = ask(addr, query, token=token, mode=mode, timeout=timeout, session_id=session_id,
                           request_id=request_id, credentials=credentials)
        else:
            live = console.is_terminal and not verbose
            with console.status("正在诊断…") if live else nullcontext() as status:
                def on_event(event: gateway_pb2.ProgressEvent) -> None:
                    line = printable(progress_line(event), one_line=True)
                    if event.code in KEPT_EVENTS and not verbose:
                        notes_kept.append(event.message_zh or event.message)
                    if verbose:
                        console.print(Text(line, style="dim"), highlight=False)
                    if isinstance(status, Status):  # one line: the spinner and this, within the width
                        status.update(Text(clip(f"正在诊断… {line}", max(console.width - 3, 10))))

                response = _stream(addr, query, token=token, mode=mode, timeout=timeout, on_event=on_event,
                                   session_id=session_id, request_id=request_id, credentials=credentials)
    except grpc.RpcError as exc:
        running = error_details(exc).get("metadata", {}).get("run_id", "")
        if exc.code() == grpc.StatusCode.ABORTED and running:
            # The request_id names a run still going: say how to follow it rather than show a failure.
            run_id = printable(running, one_line=True)
            return _fail(TerminalConsole(stderr=True),
                         f"该 request_id 的诊断仍在进行（run {run_id}）：可用 attest run-show {run_id} 查看进度，"
                         f"结束后用同一 request_id 再问即可取回结果。 / The run of this request_id is still going "
                         f"(run {run_id}); follow it with `attest run-show {run_id}` and ask again once it ends.",
                         EXIT_FAILED)
        return _fail(TerminalConsole(stderr=True), f"{describe(exc)} (gateway {addr})",
                     EXIT_USAGE if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else EXIT_FAILED)
    if as_json:
        print(terminal_json(message_to_plain(response)))
    else:
        render(console, query, response, cite=cite, notes_kept=notes_kept)
    return outcome_status(response)


def _installed(module: str) -> bool:
    """Whether `python -m module` would find it, asked of the import system's finders without
    importing anything (importlib.util.find_spec would import the service's packages)."""
    search_path: Sequence[str] | None = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        spec: ModuleSpec | None = None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None and (spec := find_spec(name, search_path)) is not None:
                break
        if spec is None:
            return False
        search_path = spec.submodule_search_locations
        if depth < len(parts) and search_path is None:
            return False  # a module, not a package: nothing below it
    return True


def run_offline(command: str, tool_args: list[str]) -> int:
    """`attest <command> ...`: the tool's module in a child process with this Python, stdin,
    stdout and stderr passed through; its exit code is ours."""
    module, _ = OFFLINE_COMMANDS[command]
    if not _installed(module):
        print(f"error: attest {command} needs {module}, which is not installed with this gateway", file=sys.stderr)
        return 127
    code = subprocess.run([sys.executable, "-m", module, *tool_args], check=False).returncode
    return code if code >= 0 else 128 - code  # killed by signal N: 128+N, as a shell reports it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attest", description="Ask Attest about an incident.")
    parser.add_argument("--addr", default=os.environ.get("ATTEST_GATEWAY_ADDR", DEFAULT_ADDR),
                        help=f"gateway address (default {DEFAULT_ADDR} or ATTEST_GATEWAY_ADDR)")
    parser.add_argument("--token", default=None, help="bearer token (default: ATTEST_AUTH_TOKEN)")
    parser.add_argument("--tls-ca", default=os.environ.get("ATTEST_GATEWAY_TLS_CA_FILE"), metavar="FILE",
                        help="reach the gateway over TLS, its certificate signed by this CA "
                             "(default: ATTEST_GATEWAY_TLS_CA_FILE; without it: plaintext)")
    parser.add_argument("--tls-cert", default=os.environ.get("ATTEST_GATEWAY_TLS_CERT_FILE"), metavar="FILE",
                        help="client certificate, for a gateway that asks for one (default: ATTEST_GATEWAY_TLS_CERT_FILE)")
    parser.add_argument("--tls-key", default=os.environ.get("ATTEST_GATEWAY_TLS_KEY_FILE"), metavar="FILE",
                        help="the client certificate's key (default: ATTEST_GATEWAY_TLS_KEY_FILE)")
    commands = parser.add_subparsers(dest="command", required=True)
    ask_parser = commands.add_parser("ask", help="ask a question and print the verified answer")
    ask_parser.add_argument("question")
    ask_parser.add_argument("--json", action="store_true", help="print the full response as JSON")
    ask_parser.add_argument("--mode", choices=["MULTI_AGENT", "SINGLE_REACT"], default="MULTI_AGENT")
    ask_parser.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    ask_parser.add_argument("--session", default="", help="ask in this session (a follow-up inherits its context)")
    ask_parser.add_argument("--request-id", default="",
                            help="idempotency key: the same key again returns that run instead of a new one")
    ask_parser.add_argument("--cite", choices=CITE_STYLES, default=CITE_FOOTNOTES,
                            help="citations as numbered footnotes with a list of sources (default), or inline")
    ask_parser.add_argument("--verbose", action="store_true", help="print every progress event on a line of its own")
    runs_parser = commands.add_parser("runs", help="list your recent runs (or a session's), newest first")
    runs_parser.add_argument("--session", default="", help="only this session's runs (the session id `attest ask` printed)")
    runs_parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                             help=f"at most this many runs (default {DEFAULT_LIMIT}; 0: all)")
    runs_parser.add_argument("--page-size", type=int, default=0, help="runs per request (default: as many as --limit)")
    runs_parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    show_parser = commands.add_parser("run-show", help="print the persisted audit of a run")
    show_parser.add_argument("run_id", help="a run id as `attest runs` or `attest ask` printed it")
    show_parser.add_argument("--session", default="", help="only show the run if it belongs to this session")
    show_parser.add_argument("--json", action="store_true",
                             help="print the audit as JSON, long values cut and marked (see --full)")
    show_parser.add_argument("--full", action="store_true", help="with --json: print the whole audit, nothing cut")
    for name, (_, help_text) in OFFLINE_COMMANDS.items():
        # Everything after the command is the tool's own argv, options and `--help` included: with
        # a prefix character no argument starts with, argparse takes each one as a positional.
        offline_parser = commands.add_parser(name, help=help_text, add_help=False, prefix_chars="\0")
        offline_parser.add_argument("tool_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    if args.command in OFFLINE_COMMANDS:
        return run_offline(args.command, args.tool_args)
    try:
        credentials = gateway_credentials(args.tls_ca, args.tls_cert, args.tls_key)
    except TlsConfigError as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.command == "ask":
        if not args.question.strip():
            print("error: the question is empty", file=sys.stderr)
            return EXIT_USAGE
        return ask_and_print(args.addr, args.question, token=args.token, as_json=args.json,
                             mode=args.mode, timeout=args.timeout, session_id=args.session,
                             request_id=args.request_id, credentials=credentials, cite=args.cite,
                             verbose=args.verbose)
    if args.command == "runs":
        if args.limit < 0 or args.page_size < 0:
            print("error: --limit and --page-size cannot be negative", file=sys.stderr)
            return 2
        return list_runs(args.addr, args.session, token=args.token, page_size=args.page_size, limit=args.limit,
                         as_json=args.json, credentials=credentials)
    return run_show(args.addr, args.run_id, token=args.token, session_id=args.session, as_json=args.json,
                    full=args.full, credentials=credentials)


if __name__ == "__main__":
    sys.exit(main())
