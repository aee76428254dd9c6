"""`attest gatekeeper-check FILE`: the gatekeeper engine on a JSON file, offline.

Input (FILE, or `-` for stdin), one JSON object:

    {"run_id": str,
     "invocations": [{"invocation_id": int, "run_id": str, "tool_name": str, "tool_call_id": str?,
                      "lifecycle": str, "evidence_status": str, "agent_result": str?,
                      "retrieval_details": {"refs_rendered": true, "source": str}
                                           | {"evidence_refs": [{"raw_path": str, "text": str}]} | null}],
     "executor_output": object}          or  "executor_output_text": str  instead

`refs_rendered` (what the executor stores): the refs are rendered from `agent_result`, the tool's
typed result, for the raw_paths that are cited; an explicit `evidence_refs` list is read as given.

Output on stdout, one JSON object: parse_status, route, verdict_ceiling, gatekeeper_result,
verified_executor_output, verified_evidence (the ceiling, result and projection are null when the
parse status is not valid). Exit 0 for any readable JSON input of that shape, whatever the
verdict; exit 2 with one line on stderr when the file cannot be read, is not JSON (NaN, Infinity
and duplicate keys included: such a document reads two ways), or has another top-level shape. An invocation row that is not a tool invocation (e.g. a string id, an unknown
lifecycle) is ignored with a note on stderr: nothing can then cite it, so the check only gets
stricter.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError

from services.gatekeeper.engine import GatekeeperCheck, check_executor_output
from shared.core.contracts import ToolInvocation
from shared.core.strict_json import loads_strict_json

PROG = "attest gatekeeper-check"
OUTPUT_FIELDS = (
    "parse_status",
    "route",
    "verdict_ceiling",
    "gatekeeper_result",
    "verified_executor_output",
    "verified_evidence",
)


class InputError(ValueError):
    """The input cannot be checked at all (exit 2); the message is one line."""


def _read_text(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
        return data.decode("utf-8-sig")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"cannot read {path}: not UTF-8 text") from None


def parse_input(text: str) -> tuple[str, list[ToolInvocation], dict[str, Any] | str, list[str]]:
    """(run_id, invocations, executor output, notes about ignored rows); InputError on bad shape."""
    try:
        document = loads_strict_json(text)
    except RecursionError:
        raise InputError("not JSON: nested too deeply") from None
    except ValueError as exc:
        raise InputError(f"not JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(document, dict):
        raise InputError(f"expected a JSON object at the top level, got {type(document).__name__}")
    run_id = document.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise InputError('"run_id" must be a non-empty string')
    rows = document.get("invocations")
    if not isinstance(rows, list):
        raise InputError('"invocations" must be a list')
    has_object = document.get("executor_output") is not None
    has_text = document.get("executor_output_text") is not None
    if has_object == has_text:
        raise InputError('give exactly one of "executor_output" (an object) and "executor_output_text" (a string)')
    if has_object and not isinstance(document["executor_output"], dict):
        raise InputError('"executor_output" must be a JSON object')
    if has_text and not isinstance(document["executor_output_text"], str):
        raise InputError('"executor_output_text" must be a string')
    invocations: list[ToolInvocation] = []
    notes: list[str] = []
    for index, row in enumerate(rows):
        try:
            invocations.append(ToolInvocation.model_validate(row, strict=True) if isinstance(row, dict) else _not_a_row(row))
        except (ValidationError, TypeError) as exc:
            notes.append(f"invocations[{index}] ignored: {_first_error(exc)}")
    output = document["executor_output"] if has_object else document["executor_output_text"]
    return run_id, invocations, output, notes


def _not_a_row(row: Any) -> ToolInvocation:
    raise TypeError(f"a {type(row).__name__}, not an object")


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ())) or "row"
        return f"{where}: {error.get('msg', 'invalid')}"
    return str(exc)


def check_document(text: str) -> tuple[dict[str, Any], list[str]]:
    """The CLI's output object for one input document, and notes for stderr. InputError on bad input."""
    run_id, invocations, output, notes = parse_input(text)
    check: GatekeeperCheck = check_executor_output(run_id, output, invocations)
    dumped = check.model_dump(mode="json")
    return {name: dumped[name] for name in OUTPUT_FIELDS}, notes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Check an executor output against the run's invocations with the gatekeeper engine, offline."
    parser.add_argument("file", metavar="FILE", help="input JSON file ('-' reads stdin)")


def run(args: argparse.Namespace) -> int:
    try:
        result, notes = check_document(_read_text(args.file))
    except InputError as exc:
        print(f"{PROG}: error: {exc}".replace("\n", " "), file=sys.stderr)
        return 2
    for note in notes:
        print(f"{PROG}: note: {note}".replace("\n", " "), file=sys.stderr)
    sys.stdout.buffer.write(json.dumps(result, ensure_ascii=False, indent=2).encode("utf-8") + b"\n")
    sys.stdout.buffer.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
