"""The package layers of docs/architecture.md hold: imports point downwards only.

Every ``import`` and ``from ... import`` in ``src/tierlog`` (also those inside functions) is checked
against the layer table below: a package may import itself and packages of lower layers, never a
package of its own layer or a higher one. So storage never imports tiered, tiered never imports the
server, and the client and the Spark source never import the server.

Inside a package, :data:`INNER_RULES` forbids some imports between its parts (the server's network wing never
imports the API handlers or the replica manager, the handlers never import storage, a remote storage manager
never imports the remote log manager), walked the same way. The imports that break an inner rule today are
pinned in :data:`KNOWN_INNER_VIOLATIONS`: a new one fails, and so does a pinned one that is gone (drop it from
the list).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tierlog"

#: Lowest first; the table in docs/architecture.md. "(root)" is ``tierlog/__init__.py``.
LAYERS: tuple[frozenset[str], ...] = (
    # shared by every layer
    frozenset({"(root)", "errors", "kafka_uuid", "hashing", "metrics", "logs", "task_dump", "tasks"}),
    frozenset({"security"}),  # TLS contexts and principals from ssl.* settings (the config table checks with it)
    frozenset({"config", "protocol", "records"}),  # sans-IO: settings, wire messages, record batches
    frozenset({"client", "storage"}),  # the Kafka client; the local log
    frozenset({"tiered"}),  # remote storage (its metadata manager uses the client)
    frozenset({"cluster", "coordinator"}),  # metadata and controller; consumer groups
    frozenset({"server", "spark", "tools"}),  # the broker; the Spark source; operator tools
    frozenset({"broker_main", "console"}),  # run a broker; the web console (on the tools and the HTTP server)
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
RANK = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(root)"


def _imports(path: Path, module: str, *, names: bool = False):
    """(line, imported tierlog module) for every import in the file, relative ones resolved. With ``names``,
    ``from X import y`` also yields ``X.y`` (y may be a module: ``from tierlog.server import apis``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tierlog" or alias.name.startswith("tierlog."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[:len(package_parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "tierlog" or target.startswith("tierlog."):
                if target == "tierlog":  # from tierlog import errors: each name is a package
                    for alias in node.names:
                        yield node.lineno, f"tierlog.{alias.name}"
                else:
                    yield node.lineno, target
                    if names:
                        for alias in node.names:
                            yield node.lineno, f"{target}.{alias.name}"


def layer_violations(src: Path) -> list[str]:
    """Each import in the tree rooted at ``src`` (a ``tierlog`` package folder) that breaks the layers."""
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        here = _package(module)
        if here not in RANK:
            found.append(f"{path}: package {here!r} is in no layer of tests/test_layers.py")
            continue
        for line, target in _imports(path, module):
            there = _package(target)
            if there == here:
                continue
            if there not in RANK:
                found.append(f"{path}:{line}: imports {target}, whose package {there!r} is in no layer")
            elif RANK[there] >= RANK[here]:
                found.append(f"{path}:{line}: {here} (layer {RANK[here]}) imports {target} "
                             f"({there}, layer {RANK[there]}): imports must point to lower layers")
    return found


#: Imports forbidden inside packages: (importer prefix, forbidden prefix, why). A prefix names a module and
#: everything under it: ``tierlog.server.network`` is the package and each of its modules.
INNER_RULES: tuple[tuple[str, str, str], ...] = (
    ("tierlog.server.network", "tierlog.server.replica_manager",
     "the network wing moves bytes and requests; partitions and logs are the replica manager's, reached by handlers"),
    ("tierlog.server.network", "tierlog.server.apis",
     "the socket server calls handlers through the protocol's HandlerRegistry, which the broker fills"),
    ("tierlog.server.apis", "tierlog.storage",
     "handlers reach the local log through the replica manager, never storage directly"),
    ("tierlog.tiered.rsm", "tierlog.tiered.remote_log_manager",
     "a remote storage manager is a plugin driven by the remote log manager, below it"),
)

#: (importing module, imported module) pairs that break an inner rule today, pinned so that no new one is added.
KNOWN_INNER_VIOLATIONS: frozenset[tuple[str, str]] = frozenset({
    ("tierlog.server.apis.log_dirs", "tierlog.storage"),  # LogManager: DescribeLogDirs and AlterReplicaLogDirs
    ("tierlog.server.apis.offsets", "tierlog.storage"),  # ListOffsets' special timestamps (EARLIEST_LOCAL_TIMESTAMP...)
})


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def inner_violations(src: Path, rules=INNER_RULES) -> dict[tuple[str, str], str]:
    """Each (importing module, imported module) in the tree rooted at ``src`` that breaks an inner rule, with
    where and why."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        for importer, forbidden, why in rules:
            if not _within(module, importer):
                continue
            reported = set()  # lines: "from X import y" is reported as X when X itself is forbidden
            for line, target in _imports(path, module, names=True):
                if line not in reported and _within(target, forbidden):
                    reported.add(line)
                    found.setdefault((module, target), f"{path}:{line}: {module} imports {target}: {why}")
    return found


def test_imports_point_downwards_only():
    assert layer_violations(SRC) == []


def test_a_wrong_import_is_reported(tmp_path):
    """The check itself: a storage module importing the server, a relative import reaching up into it, and
    the client importing the server are each reported; a downward import is not."""
    pkg = tmp_path / "tierlog"
    for sub in ("storage", "server", "client", "records"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "storage" / "log.py").write_text("from tierlog.records import batch\nfrom tierlog.server import broker\n")
    (pkg / "storage" / "lazy.py").write_text("def f():\n    from ..server.broker import Broker\n    return Broker\n")
    (pkg / "client" / "fetcher.py").write_text("import tierlog.server.network\n")
    (pkg / "server" / "broker.py").write_text("from tierlog.storage import log\n")
    found = layer_violations(pkg)
    assert len(found) == 3, found
    assert any("storage/log.py:2" in v and "tierlog.server" in v for v in found)
    assert any("storage/lazy.py:2" in v and "tierlog.server.broker" in v for v in found)
    assert any("client/fetcher.py:1" in v for v in found)


def test_inner_rules_hold_but_for_the_pinned_imports():
    found = inner_violations(SRC)
    new = {k: v for k, v in found.items() if k not in KNOWN_INNER_VIOLATIONS}
    assert new == {}, "\n".join(new.values())
    gone = KNOWN_INNER_VIOLATIONS - found.keys()
    assert not gone, f"no longer imported, drop from KNOWN_INNER_VIOLATIONS: {sorted(gone)}"


def test_an_inner_rule_broken_is_reported(tmp_path):
    """The inner check itself: the network wing importing the replica manager (by module, by name from its
    package, and relatively) is reported, as is a handler importing storage; an allowed import is not."""
    pkg = tmp_path / "tierlog"
    for sub in ("server", "server/network", "server/apis", "storage"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "server" / "network" / "a.py").write_text("from tierlog.server.replica_manager import ReplicaManager\n")
    (pkg / "server" / "network" / "b.py").write_text("from tierlog.server import apis\nfrom . import a\n")
    (pkg / "server" / "network" / "c.py").write_text("def f():\n    from ...server import replica_manager\n")
    (pkg / "server" / "apis" / "fetch.py").write_text("import tierlog.storage.log\nfrom tierlog.server import broker\n")
    found = inner_violations(pkg)
    assert set(found) == {
        ("tierlog.server.network.a", "tierlog.server.replica_manager"),
        ("tierlog.server.network.b", "tierlog.server.apis"),
        ("tierlog.server.network.c", "tierlog.server.replica_manager"),
        ("tierlog.server.apis.fetch", "tierlog.storage.log"),
    }, found
