"""What a bare ``pip install .`` brings is enough for every module a user of the base install reaches.

Each module's import-time imports (its body, not its functions) are followed through tierlog's own
modules; every third-party module met on the way must come from a base dependency in pyproject.toml.
Modules of an optional feature (an extra) may also use that extra's packages, and no base module may
import one of them at import time: the feature's entry points import it lazily and name the extra when it
is missing. CI's bare-install step (scripts/fresh_install.py) checks the same by running the README.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: Modules that belong to an optional feature, and the extra that brings their packages.
EXTRA_MODULES = {
    "tierlog.spark.columnar": "spark",
    "tierlog.spark.read": "spark",
    "tierlog.spark.sink": "spark",
    "tierlog.spark.source": "spark",
    "tierlog.spark.table": "spark",
    "tierlog.tiered.rsm.objectstore": "objectstore",
    "tierlog.tiered.rsm.requests": "objectstore",  # counts the objectstore backend's obstore calls
}


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


@cache
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _import_names(distributions: set[str]) -> set[str]:
    """Top-level import names provided by the given distributions (as installed in this environment)."""
    names = set()
    for module, dists in _installed().items():
        if any(d.lower().replace("_", "-") in distributions for d in dists):
            names.add(module)
    return names


def _allowed(extra: str | None) -> set[str]:
    dists = {_requirement_name(r) for r in _project()["dependencies"]}
    if extra:
        for r in _project()["optional-dependencies"][extra]:
            name = _requirement_name(r)
            dists.add(name)
            if name == "tierlog":  # an extra that includes another: tierlog[x]
                dists |= {_requirement_name(x) for x in _project()["optional-dependencies"][r.split("[")[1][:-1]]}
    return _import_names(dists)


def _module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def _is_optional_try(node: ast.Try) -> bool:
    """``try: import x / except ImportError:``: an import the module does without."""
    for handler in node.handlers:
        kind = handler.type
        names = [kind] if not isinstance(kind, ast.Tuple) else list(kind.elts) if kind else []
        if any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names):
            return True
    return False


@cache
def _import_time_imports(module: str) -> tuple[str, ...]:
    """Absolute names of what the module imports while it is being imported."""
    path = _module_file(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[str] = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module
                found.append(target)
                # ``from package import module``: the submodule is imported too
                found.extend(f"{target}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                if not _is_optional_try(node):
                    visit(node.body)
                visit(node.finalbody)
            elif isinstance(node, (ast.With, ast.For, ast.While)):
                visit(node.body)

    visit(ast.parse(path.read_text(), str(path)).body)
    return tuple(found)


def _third_party_reached(module: str) -> dict[str, str]:
    """Every third-party top-level name the module's import reaches, with the tierlog module importing it."""
    reached: dict[str, str] = {}
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        parts = current.split(".")
        todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))  # parent packages run first
        for name in _import_time_imports(current):
            top = name.split(".")[0]
            if top == "tierlog":
                if _module_file(name) is not None:
                    todo.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                reached.setdefault(top, current)
    return reached


def _all_modules() -> list[str]:
    modules = []
    for path in sorted((SRC / "tierlog").rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        modules.append(".".join(parts))
    return modules


def test_every_module_imports_with_its_own_dependencies():
    problems = []
    allowed_by_extra = {extra: _allowed(extra) for extra in {None, *EXTRA_MODULES.values()}}
    for module in _all_modules():
        extra = EXTRA_MODULES.get(module)
        allowed = allowed_by_extra[extra]
        for top, via in sorted(_third_party_reached(module).items()):
            if top not in allowed:
                where = f"base install + the {extra!r} extra" if extra else "base install"
                problems.append(f"{module}: imports {top} (in {via}), which the {where} does not provide")
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_missing_base_dependency(monkeypatch):
    """The check itself: with cryptography taken out of the base dependencies, the SASL modules fail it."""
    project = dict(_project())
    project["dependencies"] = [r for r in project["dependencies"] if _requirement_name(r) != "cryptography"]
    _project.cache_clear()
    monkeypatch.setattr(sys.modules[__name__], "_project", lambda: project)
    allowed = _allowed(None)
    assert "cryptography" not in allowed
    reached = _third_party_reached("tierlog.broker_main")
    assert "cryptography" in reached, reached
