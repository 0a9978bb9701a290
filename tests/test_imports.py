"""The modules of ``coordinator`` and ``bench`` form no import circle, import only downwards through the
layers, and each imports on its own.

A circle hidden by a function-level import, or a module that fails when a program imports it before
any other, shows up only in some programs (an embedder that imports ``coordinator.actors.stops`` first); these
tests find both in every module.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("coordinator", "bench")

# The layers, top first: a module imports modules of its own layer and of the layers below, never of
# one above (design/README.md draws them). A module belongs to the layer of its longest listed prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("test rigs", ("bench", "coordinator.chaos", "coordinator.testing", "coordinator.demo")),
    (
        "faces",
        (
            "coordinator.cli",
            "coordinator.__main__",
            "coordinator.remote",
            "coordinator.server",
            "coordinator.client",
            "coordinator.log_output",
            "coordinator.event_lines",
        ),
    ),
    (
        "embedding API",
        (
            "coordinator",
            "coordinator._open",
            "coordinator._coordinator",
            "coordinator.aio",
            "coordinator._guest",
        ),
    ),
    (
        "runtime",
        (
            "coordinator.registry",
            "coordinator.decisions",
            "coordinator.prompts",
            "coordinator.retention",
            "coordinator.orphans",
            "coordinator.claims",
        ),
    ),
    ("actors", ("coordinator.actors",)),
    (
        "parts",
        (
            "coordinator.tools",
            "coordinator.mcp",
            "coordinator.models",
            "coordinator.bus",
            "coordinator.subscription",
            "coordinator.live_buffer",
            "coordinator.tracing",
            "coordinator.metrics",
            "coordinator.checkpoints",
            "coordinator.permissions",
            "coordinator.edited_inputs",
            "coordinator.claims",
        ),
    ),
    ("store", ("coordinator.store",)),
    (
        "values",
        (
            "coordinator.reasons",
            "coordinator.logs",
            "coordinator.statuses",
            "coordinator.errors",
            "coordinator.events",
            "coordinator.event_payloads",
            "coordinator.records",
            "coordinator.wire",
            "coordinator.ids",
            "coordinator.clock",
            "coordinator.timeslice",
            "coordinator.config",
        ),
    ),
)


def _modules() -> dict[str, Path]:
    """Every module of the packages by its dotted name (a package by its own name)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the packages that ``module`` imports anywhere: at the top, in a function, or
    for type checking only. ``from a import b`` imports the module ``a.b`` if there is one, else ``a``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {name for name in found if name in modules and name != module}


def test_the_modules_import_one_another_without_a_circle() -> None:
    """Arrows go down (design/actors.md): a circle would make some module's import order matter."""
    modules = _modules()
    graph = {module: _imported(module, path, modules) for module, path in modules.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as circle:
        # graphlib lists each module before the ones that import it.
        modules_in_circle = " -> ".join(reversed(circle.args[1]))
        raise AssertionError(
            f"an import circle, each module importing the next: {modules_in_circle}"
        ) from None


def _layer(module: str) -> int:
    """The index of ``module``'s layer in ``LAYERS`` (0 is the top)."""
    best, found = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    assert found is not None, f"{module} is in no layer of LAYERS"
    return found


def test_every_import_goes_down_the_layers() -> None:
    """A lower layer that imports a higher one (the store importing an actor, a tool importing the
    embedding API) ties the layers into one: every change would reach everywhere."""
    modules = _modules()
    upward = [
        f"{module} ({LAYERS[_layer(module)][0]}) imports {imported} ({LAYERS[_layer(imported)][0]})"
        for module, path in modules.items()
        for imported in sorted(_imported(module, path, modules))
        if _layer(imported) < _layer(module)
    ]
    assert not upward, "imports that go up the layers:\n" + "\n".join(upward)


# Imports modules first, each in a process of its own forked from one that has loaded only the
# third-party modules the packages use (a fork then costs the packages' own imports alone). Importing a
# module first imports its parent package first; when that already loaded the module, importing the
# module first is importing the package first: so, a level of the tree at a time, a module is imported
# first only when its parent package's first import did not load it. Prints the modules that failed.
_IMPORT_EACH_FIRST = """
import importlib, os, sys, traceback
sys.path.insert(0, os.getcwd())
packages = ("coordinator", "bench")
for name in sys.argv[1].split():
    try:
        importlib.import_module(name)
    except ImportError:
        pass
assert not [m for m in sys.modules if m.partition(".")[0] in packages], "a package module was preloaded"

def first(module):
    \"\"\"Fork a process that imports ``module`` first; it writes what that loaded to a pipe.\"\"\"
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, module, read
    os.close(read)
    try:
        importlib.import_module(module)
    except BaseException:
        print(f"{module}: {traceback.format_exc().strip().splitlines()[-1]}", flush=True)
        os._exit(1)
    os.write(write, " ".join(m for m in sys.modules if m.partition(".")[0] in packages).encode())
    os._exit(0)

loaded, failed, forked, modules = {"": set()}, [], 0, sys.argv[2:]
for depth in range(max(m.count(".") for m in modules) + 1):
    level = [m for m in modules if m.count(".") == depth]
    todo = [m for m in level if m not in loaded[m.rpartition(".")[0]]]
    loaded.update((m, loaded[m.rpartition(".")[0]]) for m in level if m not in todo)
    while todo:
        batch = [first(m) for m in todo[: os.cpu_count() or 2]]
        del todo[: len(batch)]
        forked += len(batch)
        for pid, module, read in batch:
            with os.fdopen(read) as pipe:
                loaded[module] = set(pipe.read().split())
            if os.waitpid(pid, 0)[1]:
                failed.append(module)
print(f"imported first: {forked} of {len(modules)} modules (the rest with their package)")
print("failed:", " ".join(sorted(failed)), ";")
"""

_THIRD_PARTY = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(" ".join(m for m in sorted(sys.modules) if m.partition(".")[0] not in ("coordinator", "bench")))
"""


def test_every_module_imports_when_it_is_the_first_one_imported() -> None:
    """``coordinator/__init__.py`` imports the embedding API, which imports the actors, which import
    lower modules of ``coordinator``: whichever module a program imports first, none may find another
    half-initialized. (``__main__`` modules run the CLI when imported; they are not modules to import.)
    """
    modules = [m for m in _modules() if not m.endswith("__main__")]
    third_party = subprocess.run(
        [sys.executable, "-c", _THIRD_PARTY, *modules], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert third_party.returncode == 0, third_party.stderr
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FIRST, third_party.stdout, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "failed:  ;", done.stdout
