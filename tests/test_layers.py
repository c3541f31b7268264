"""The engine's architecture, checked from its source: layers, cycles, private names.

Every module of ``antkv`` is parsed with :mod:`ast`; every import counts, at module level or
inside a function (a function-level import hides a dependency, it does not remove it).

* **Layers.** :data:`LAYERS` lists the layers bottom first (``docs/impl.md`` draws the same
  tree).  A module belongs to the layer of the longest entry naming it or its package; a module
  no entry names fails the test, so a new module is placed on purpose.  A module may import its
  own layer or lower ones, never a higher one.
* **No cycles.** The module graph has no cycle, within a layer either.
* **One owner per piece of state.** A module does not read or write another module's
  ``_private`` attribute (``db._x`` outside the ``DB`` class, ``reader._index``), nor import a
  private name from another module.  ``self._x`` is always the module's own: the DB's parts
  (``antkv.db.background``, ``antkv.db.write_path``, ...) are base classes of ``DB``, and
  ``DBState.__init__`` (``antkv.db.state``) declares every field they use.  What is still done is
  listed in :data:`PRIVATE_ALLOWED`, with the reason; the test fails when an entry is no longer
  needed, so the list only shrinks.
* **The DB's parts call one way.** Each part derives from the parts it calls: every ``self.x``
  a part uses is a field ``DBState.__init__`` declares or a method of the part or of one of its
  bases, and no method but ``DBState.__init__`` creates a field.  So a part never calls a part
  above it, and a reader (or an IDE) resolves every ``self.x`` from the part's own bases.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "antkv")

# bottom first; an entry names a module or a package (then every module under it)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("antkv.errors", "antkv.base")),
    ("file system", ("antkv.fs",)),
    ("records and memory", ("antkv.record", "antkv.memory")),
    ("memtable and file formats", ("antkv.memtable", "antkv.sst", "antkv.vlog")),
    ("manifest", ("antkv.manifest",)),
    ("read", ("antkv.read",)),
    ("flush and compaction", ("antkv.compaction",)),
    ("options", ("antkv.options",)),
    (
        "what the DB's parts use: the directory's own files, read-only opens, write limits, external tables",
        ("antkv.db.files", "antkv.db.read_only", "antkv.db.write_limits", "antkv.db.sst_file_writer"),
    ),
    (
        "the DB's shared state and its parts (they call one way: test_db_parts_call_one_way)",
        (
            "antkv.db.state", "antkv.db.obsolete_files", "antkv.db.background", "antkv.db.write_path",
            "antkv.db.value_log_gc", "antkv.db.checkpoint", "antkv.db.ingest", "antkv.db.resume", "antkv.db.stats",
            "antkv.db.read_api", "antkv.db.recovery",
        ),
    ),
    ("database: the DB handle", ("antkv.db",)),
    ("public API", ("antkv", "antkv.destroy", "antkv.repair")),
    ("spark: the state store and its commit protocol", ("antkv.spark.store",)),
    ("spark: state encodings and views", ("antkv.spark.state",)),
    ("spark: the runtime (routing, tasks, output)", ("antkv.spark.runtime",)),
    ("spark: the StatefulProcessor compatibility layer", ("antkv.spark.processor",)),
    ("spark: tools over state", ("antkv.spark.tools",)),
    ("spark: public API", ("antkv.spark",)),
    ("tools", ("antkv.__main__", "antkv.tools", "antkv.demo")),
]

# third-party packages a layer must not import (at any depth), and why
FORBIDDEN_IMPORTS: dict[str, tuple[str, set[str]]] = {
    "antkv.spark.store": ("a state store opens, commits and loads in any Python process", {"pandas", "pyspark"}),
    "antkv.spark.state": ("state encodings and views run inside a task, with no Spark session", {"pyspark"}),
}

# private names any module may use, and why
PRIVATE_CONVENTIONS = {
    "_check": "the invariant self-check every structure offers (run under CHECK_INVARIANTS and by tests)",
}

# module -> (why, the private names of other owners it still uses); only ever shrinks
_DB_FIELDS = "works on the database's fields directly instead of through its methods"
PRIVATE_ALLOWED: dict[str, tuple[str, set[str]]] = {
    "antkv.read.read_view": (
        "a read view reads its database's closed flag, value-log reader, table cache and prefetch pool",
        {
            "_closed", "_open_table", "_prefetch_pool", "_vlog_reader"
        },
    ),
    "antkv.spark.tools.migrate": (
        "a Spark checkpoint's query progress is copied through Spark's own Hadoop file system, "
        "which PySpark reaches only through its py4j gateway",
        {"_jvm", "_jsc"},
    ),
    "antkv.spark.state.views": (
        "the per-key rows of a processor are built from pandas' blocks: a third of the cost of "
        "iloc, once per grouping key (row_slicer falls back to iloc without these)",
        {"_mgr", "_from_mgr", "_simple_new", "_ndarray", "_from_backing_data", "_blknos", "_blklocs"},
    ),
}


def _module_files() -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(ROOT):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = path
    return out


MODULES = _module_files()
TREES = {m: ast.parse(open(p, encoding="utf-8").read(), p) for m, p in MODULES.items()}


def _is_package(mod: str) -> bool:
    return MODULES[mod].endswith("__init__.py")


def imports_of(mod: str) -> list[tuple[str, int]]:
    """``(imported antkv module, line)`` for every import in ``mod``, at any depth."""
    pkg = mod if _is_package(mod) else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(TREES[mod]):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "antkv"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "antkv":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in MODULES else base, node.lineno))
    return out


def layer_of(mod: str) -> int:
    best, best_len = None, -1
    for i, (_name, entries) in enumerate(LAYERS):
        for e in entries:
            if (mod == e or (e != "antkv" and mod.startswith(e + "."))) and len(e) > best_len:
                best, best_len = i, len(e)
    if best is None:
        raise AssertionError(f"module {mod} is in no layer: add it to LAYERS (tests/test_layers.py) and docs/impl.md")
    return best


GRAPH = {m: sorted({t for t, _ in imports_of(m) if t != m}) for m in MODULES}


def test_every_module_is_in_a_layer():
    for m in MODULES:
        layer_of(m)


def third_party_imports_of(mod: str) -> list[tuple[str, int]]:
    """``(top-level package, line)`` for every non-antkv absolute import in ``mod``, at any depth."""
    out = []
    for node in ast.walk(TREES[mod]):
        if isinstance(node, ast.Import):
            out += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.module.split(".")[0], node.lineno))
    return [(name, line) for name, line in out if name != "antkv"]


def test_lower_spark_layers_import_no_spark_or_pandas():
    bad = []
    for m in MODULES:
        for prefix, (why, forbidden) in FORBIDDEN_IMPORTS.items():
            if m == prefix or m.startswith(prefix + "."):
                bad += [f"{MODULES[m]}:{line}: imports {name} ({why})"
                        for name, line in third_party_imports_of(m) if name in forbidden]
    assert not bad, "\n".join(bad)
    assert ("pyspark", 1) in third_party_imports_of("antkv.spark.runtime.routing") or any(
        n == "pyspark" for n, _ in third_party_imports_of("antkv.spark.runtime.routing"))


def test_no_upward_import():
    bad = []
    for m in MODULES:
        for target, line in imports_of(m):
            if target not in MODULES:
                bad.append(f"{MODULES[m]}:{line}: imports {target}, which does not exist")
            elif layer_of(target) > layer_of(m):
                bad.append(
                    f"{MODULES[m]}:{line}: {m} ({LAYERS[layer_of(m)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]}), a higher layer"
                )
    assert not bad, "\n".join(bad)


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for t in graph.get(n, ()):
            if state.get(t) == 1:
                return stack[stack.index(t) :] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_catch_what_they_claim():
    # a cycle hidden in a function-level import is found...
    tree = ast.parse("def f():\n    from .b import x\n")
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": [], "c": ["a", "b"]}) is None
    # ...and the layers order the tree: the bottom cannot see the top
    assert layer_of("antkv.base.dbformat") < layer_of("antkv.fs.os_file_system") < layer_of("antkv.sst.reader")
    assert layer_of("antkv.manifest.version_set") < layer_of("antkv.compaction.picker") < layer_of("antkv.db")
    assert layer_of("antkv") > layer_of("antkv.db")
    assert layer_of("antkv.db.files.info_log") < layer_of("antkv.db.state") < layer_of("antkv.db.database") == layer_of("antkv.db")
    assert _part_calls_outside_bases("class DBState:\n    def __init__(self):\n        self._a = 1\n"
                                     "class P(DBState):\n    def f(self):\n        return self._a\n"
                                     "class Q(DBState):\n    def g(self):\n        return self.f()\n") == [("Q", "f", 9)]
    assert _part_calls_outside_bases("class DBState:\n    def __init__(self):\n        self._a = 1\n"
                                     "class P(DBState):\n    def f(self):\n        self._b = 2\n") == [("P", "_b", 6)]
    with pytest.raises(AssertionError):
        layer_of("antkv_other.module")
    assert _private_uses_in("antkv.x", "def f(db):\n    return db._mutex\n") == [("_mutex", 2)]
    assert _private_uses_in("antkv.x", "class A:\n    def f(self):\n        return self._m, A._n, self.__dict__\n") == [("_n", 3)]
    assert _private_uses_in("antkv.x", "from .y import _z\n") == [("_z", 1)]
    assert _private_uses_in("antkv.x", "def f(db):\n    return getattr(db, '_vlog', None)\n") == [("_vlog", 2)]
    assert _private_uses_in("antkv.x", "_k = 1\ndef f(m):\n    return m._k\n") == []
    assert _private_uses_in("antkv.x", "import os\ndef f():\n    os._exit(1)\n") == []


def _private_uses_in(mod: str, source: str) -> list[tuple[str, int]]:
    """``(name, line)`` for each use in ``source`` of a private name ``mod`` does not own:
    ``x._name`` (``x`` not ``self``/``cls``; the module defines no ``_name`` of its own),
    ``from m import _name`` of another module, ``getattr(x, "_name")``."""
    tree = ast.parse(source)
    own: set[str] = set()
    # modules of the standard library and others (``os._exit`` is their API, not our state)
    foreign = {
        (a.asname or a.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for a in node.names
        if a.name.split(".")[0] != "antkv"
    }
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    for node in ast.walk(tree):  # class-level names and __slots__ entries
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    own.add(st.target.id)
                if isinstance(st, ast.Assign):
                    for t in st.targets:
                        if isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(st.value, (ast.Tuple, ast.List)):
                            own.update(e.value for e in st.value.elts if isinstance(e, ast.Constant))
    uses = []

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            if isinstance(node.value, ast.Name) and (node.value.id in ("self", "cls") or node.value.id in foreign):
                continue
            if node.attr not in own:
                uses.append((node.attr, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if private(a.name) and not (node.module or "").startswith("__"):
                    uses.append((a.name, node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr"):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                if private(node.args[1].value) and node.args[1].value not in own:
                    uses.append((node.args[1].value, node.lineno))
    return sorted(uses, key=lambda u: (u[1], u[0]))


def private_uses() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = defaultdict(list)
    for m, path in MODULES.items():
        with open(path, encoding="utf-8") as fh:
            src = fh.read()
        for name, line in _private_uses_in(m, src):
            found[(m, name)].append(line)
    return found


def test_no_access_to_another_modules_private_names():
    found = private_uses()
    found = {(m, name): lines for (m, name), lines in found.items() if name not in PRIVATE_CONVENTIONS}
    allowed = {(m, name) for m, (_why, names) in PRIVATE_ALLOWED.items() for name in names}
    new = [
        f"{MODULES[m]}:{lines[0]}: {m} uses {name}, which it does not own"
        for (m, name), lines in sorted(found.items())
        if (m, name) not in allowed
    ]
    assert not new, "call a method of the owner instead (or, with a reason, add to PRIVATE_ALLOWED):\n" + "\n".join(new)
    stale = sorted(f"{m}: {name}" for (m, name) in allowed - set(found))
    assert not stale, "no longer needed, remove from PRIVATE_ALLOWED:\n" + "\n".join(stale)


def _part_calls_outside_bases(sources: dict[str, str] | str) -> list[tuple[str, str, int]]:
    """``(class, name, line)`` for each ``self.name`` of a class deriving from ``DBState`` that
    is neither a field ``DBState.__init__`` declares nor a method of the class or its bases (a
    call to a part it does not derive from), or that creates a field outside ``DBState.__init__``.
    ``sources``: module name -> source (the classes of all of them resolve together)."""
    if isinstance(sources, str):
        sources = {"m": sources}
    classes = {c.name: c for src in sources.values() for c in ast.walk(ast.parse(src)) if isinstance(c, ast.ClassDef)}

    def ancestors(name: str) -> list[str]:
        out = [name]
        for b in classes[name].bases:
            if isinstance(b, ast.Name) and b.id in classes:
                out += [a for a in ancestors(b.id) if a not in out]
        return out

    def self_attrs(node):
        return [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"]

    state = classes["DBState"]
    init = next(n for n in state.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    fields = {n.attr for n in self_attrs(init) if isinstance(n.ctx, ast.Store)}
    bad = []
    for name, cls in classes.items():
        chain = ancestors(name)
        if "DBState" not in chain:
            continue
        known = fields | {n.name for a in chain for n in classes[a].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for n in self_attrs(cls):
            if n.attr not in known or (isinstance(n.ctx, ast.Store) and n.attr not in fields):
                bad.append((name, n.attr, n.lineno))
    return bad


def test_db_parts_call_one_way():
    db_modules = sorted(m for m in MODULES if m == "antkv.db" or m.startswith("antkv.db."))
    bad = _part_calls_outside_bases({m: open(MODULES[m], encoding="utf-8").read() for m in db_modules})
    assert not bad, "a part uses what neither its bases nor DBState.__init__ declare (derive from the part it calls):\n" + "\n".join(
        f"{cls}: self.{name} (line {line} of its module)" for cls, name, line in bad)
    # every part is a base of DB, directly or through the parts deriving from it
    import importlib

    from antkv.db import DB
    from antkv.db.state import DBState

    parts = [v for m in db_modules for v in vars(importlib.import_module(m)).values()
             if isinstance(v, type) and issubclass(v, DBState)]
    assert len(parts) >= 12 and all(cls in DB.__mro__ for cls in parts), parts


def test_no_module_shadows_the_standard_library():
    """A module named as a standard-library one (``posix``, ``inspect``) is the one a reader,
    a debugger or a script run from its directory finds instead of the standard library's."""
    import sys

    bad = sorted(m for m in MODULES if m.rpartition(".")[2] in sys.stdlib_module_names)
    assert not bad, f"rename: {bad}"
