"""Reading an operator-extensible data file (the signal semantics, the failure-mode catalogue):
JSON validated by a pydantic model, every problem a clear error naming the file and the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

_M = TypeVar("_M", bound=BaseModel)
MAX_PROBLEMS = 5


def dotted(_raw: object, loc: tuple[int | str, ...]) -> str:
    """A validation error's location as a dotted path ("(top)" for the file itself)."""
    return ".".join(str(part) for part in loc) or "(top)"


def read_model_file(path: Path, model: type[_M], error: type[Exception], what: str,
                    locate: Callable[[object, tuple[int | str, ...]], str] = dotted) -> _M:
    """The file read as `model`; `error` (its message naming `what` file, `path` and the first
    problems, each located by `locate`) when it cannot be read, is not JSON or has another shape."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{what} file {path} cannot be read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} file {path} is not JSON: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{locate(raw, error_['loc'])}: {error_['msg']}" for error_ in exc.errors()[:MAX_PROBLEMS])
        raise error(f"{what} file {path} is not valid: {problems}") from exc
