"""Boundaries that hold: each service and the gateway is deployed on its own, so none
imports another. Services and the gateway import `shared/` (the domain core `shared/core/`
included); `shared/` imports neither.

Every .py file under gateway/, services/ and shared/ is parsed, and every import in it counts:
module-level or inside a function, `import x` or `from x import y` (`from services import
planner` names `services.planner`), relative ones resolved against the file's package. A module
loaded by name counts too: `importlib.import_module("services.x")` (or `__import__`,
`importlib.util.find_spec`, `runpy.run_module`) names its literal; and in a file that loads a
module from a name it computes, every string literal spelling a module across the boundary counts,
since it may be that name (a registry of command modules, say). Running a service's module in a
child process (`python -m services.x`) imports nothing here and is fine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("gateway", "services", "shared")
# Calls that load a module named by their first argument.
LOADERS = {"importlib.import_module", "importlib.__import__", "importlib.util.find_spec", "runpy.run_module", "__import__"}
DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _module_of(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted module a file defines, and whether it is a package's `__init__`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules one import statement names, relative ones made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # `from services import planner` imports the package services.planner.
    if source in ("services", "gateway"):
        return [f"{source}.{alias.name}" for alias in node.names]
    return [source]


def _forbidden(importer: str, imported: str) -> bool:
    here, there = importer.split("."), imported.split(".")
    if here[0] == "services":
        return (there[0] == "services" and len(here) > 1 and len(there) > 1 and here[1] != there[1]) or there[0] == "gateway"
    if here[0] == "gateway":
        return there[0] == "services"
    if here[0] == "shared":
        return there[0] in ("services", "gateway")
    return False


def _aliases(tree: ast.Module) -> dict[str, str]:
    """What each imported name stands for: `import importlib.util as u` -> u: importlib.util,
    `from importlib import import_module` -> import_module: importlib.import_module."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`importlib.util.find_spec` for that expression, its first name resolved through the imports."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _loaded_by_name(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) for each module the file loads by name: the literal argument of a loader
    call, or, when some loader call's argument is computed, every dotted-name literal in the file."""
    aliases = _aliases(tree)
    found: list[tuple[int, str]] = []
    computed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _dotted(node.func, aliases) in LOADERS:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((first.lineno, first.value))
            else:
                computed = True
    if computed:
        found += [(node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED_NAME.fullmatch(node.value)]
    return found


def boundary_violations(root: Path) -> list[str]:
    """`file:line -> module` for every import that crosses a boundary, in file order."""
    found: list[str] = []
    for top in CHECKED:
        for path in sorted((root / top).rglob("*.py")):
            module, is_package = _module_of(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for imported in _imported(node, module, is_package):
                    if _forbidden(module, imported):
                        found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} -> {imported}")
            for line, loaded in _loaded_by_name(tree):
                if _forbidden(module, loaded):
                    found.append(f"{path.relative_to(root).as_posix()}:{line} -> {loaded}")
    return sorted(found, key=lambda row: (row.split(":")[0], int(row.split(":")[1].split(" ")[0])))


def test_no_service_imports_another_and_the_gateway_and_shared_import_no_service() -> None:
    violations = boundary_violations(ROOT)
    assert not violations, (
        "imports across deployment boundaries (services never import each other; the gateway "
        "imports no service; shared/ imports neither; what two of them need belongs in "
        "shared/core/):\n" + "\n".join(violations)
    )


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_check_names_every_offending_import_and_nothing_else(tmp_path: Path) -> None:
    for package in ("gateway", "services", "services/alpha", "services/alpha/tools", "services/beta", "shared", "shared/core"):
        _write(tmp_path, f"{package}/__init__.py", "")
    _write(tmp_path, "services/alpha/engine.py", (
        "from services.alpha.tools import probe\n"      # its own package: fine
        "from shared.core import catalogue\n"           # the core: fine
        "from . import helpers\n"                       # relative, its own package: fine
        "from services.beta.engine import run\n"        # line 4: another service
        "\n"
        "def late():\n"
        "    import services.beta.engine\n"             # line 7: function-level
        "    from services import beta\n"               # line 8: `from services import <service>`
        "    from gateway.graph import flow\n"          # line 9: a service importing the gateway
    ))
    _write(tmp_path, "services/alpha/tools/probe.py", (
        "from ...beta import engine\n"                  # line 1: relative, resolves to services.beta
        "from .. import engine as mine\n"               # its own package: fine
    ))
    _write(tmp_path, "gateway/graph.py", (
        "import shared.core.templates\n"                # fine
        "from services.beta.templates import render\n"  # line 2: the gateway importing a service
    ))
    _write(tmp_path, "shared/core/catalogue.py", (
        "def f():\n"
        "    from gateway import graph\n"               # line 2: shared importing the gateway
        "    import services.alpha.engine\n"            # line 3: shared importing a service
    ))

    assert boundary_violations(tmp_path) == [
        "gateway/graph.py:2 -> services.beta.templates",
        "services/alpha/engine.py:4 -> services.beta.engine",
        "services/alpha/engine.py:7 -> services.beta.engine",
        "services/alpha/engine.py:8 -> services.beta",
        "services/alpha/engine.py:9 -> gateway.graph",
        "services/alpha/tools/probe.py:1 -> services.beta",
        "shared/core/catalogue.py:2 -> gateway.graph",
        "shared/core/catalogue.py:3 -> services.alpha.engine",
    ]


def test_a_module_loaded_by_name_counts_like_an_import(tmp_path: Path) -> None:
    for package in ("gateway", "services", "services/alpha", "services/beta", "shared"):
        _write(tmp_path, f"{package}/__init__.py", "")
    _write(tmp_path, "gateway/cli.py", (
        "import importlib\n"
        "COMMANDS = {\n"
        "    'verdict': 'services.beta.verdict_cli',\n"   # line 3: loaded below from a computed name
        "    'ask': 'shared.client',\n"                   # shared/: fine
        "}\n"
        "def run(name):\n"
        "    return importlib.import_module(COMMANDS[name]).main()\n"
    ))
    _write(tmp_path, "gateway/launcher.py", (
        "import subprocess, sys\n"
        "def start():\n"
        "    subprocess.run([sys.executable, '-m', 'services.beta'])\n"  # a child process: fine
    ))
    _write(tmp_path, "services/alpha/engine.py", (
        "from importlib import import_module as load\n"
        "import importlib.util\n"
        "import runpy\n"
        "def late():\n"
        "    load('services.alpha.tools')\n"                     # its own package: fine
        "    load('services.beta.engine')\n"                     # line 6
        "    importlib.util.find_spec('services.beta.rules')\n"  # line 7: imports services.beta
        "    runpy.run_module('gateway.cli')\n"                  # line 8
        "    return 'services.beta.engine'\n"                    # a string, no computed load: fine
    ))
    _write(tmp_path, "shared/plugins.py", (
        "def late():\n"
        "    return __import__('services.alpha.engine')\n"       # line 2
    ))

    assert boundary_violations(tmp_path) == [
        "gateway/cli.py:3 -> services.beta.verdict_cli",
        "services/alpha/engine.py:6 -> services.beta.engine",
        "services/alpha/engine.py:7 -> services.beta.rules",
        "services/alpha/engine.py:8 -> gateway.cli",
        "shared/plugins.py:2 -> services.alpha.engine",
    ]
