"""The package's modules and their imports, parsed from the source (nothing is imported), and
the layer table they must follow (docs/ARCHITECTURE.md, "Layers").

Read by tests/test_layers.py (imports point down, no cycles, private TensorFlow names only in
the adapter, the environment read in one module) and tests/test_doctests.py (every module's
examples; the pure modules import no TensorFlow). The tree is read and each source parsed once
per session.
"""

from __future__ import annotations

import ast
import functools
import os
import types
from typing import Iterable, Mapping

from support import REPO

#: Where each installed package's sources live (pyproject.toml's package-dir).
ROOTS = {"tf_hetero": "tf_hetero", "tf_hetero.strategies": "strategies",
         "tf_hetero.models": "models"}

#: The layers, lowest first (docs/ARCHITECTURE.md, "Layers"). A module may import its own
#: layer and the layers below it. Module names are prefixes: ``tf_hetero.engine`` covers the
#: package and every module in it; the longest prefix decides.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("tf_hetero.env", "tf_hetero.hooks", "tf_hetero.patching", "tf_hetero.tflogs")),
    ("tfcompat", ("tf_hetero.tfcompat",)),
    ("engine", ("tf_hetero.engine",)),
    ("policies", ("tf_hetero.policies",)),
    ("telemetry", ("tf_hetero.telemetry",)),
    ("cluster / emulation", ("tf_hetero.cluster", "tf_hetero.emulation", "tf_hetero.data",
                             "tf_hetero.models")),
    ("strategies.runtime", ("tf_hetero.strategies.runtime",)),
    ("strategies", ("tf_hetero.strategies", "tf_hetero.callbacks")),
    ("tools / sim", ("tf_hetero.tools", "tf_hetero.sim")),
    ("api", ("tf_hetero", "tf_hetero.__main__")),
]

#: Narrower rules inside a layer: the simulator runs the pure layers on virtual time, so it
#: imports only them (and the pure descriptions of the strategies and profiles), never the
#: TensorFlow glue and never the commands beside it.
ONLY: dict[str, tuple[str, ...]] = {
    "tf_hetero.sim": ("tf_hetero.sim", "tf_hetero.engine", "tf_hetero.policies",
                      "tf_hetero.telemetry", "tf_hetero.env", "tf_hetero.emulation.profile",
                      "tf_hetero.data", "tf_hetero.strategies.config",
                      "tf_hetero.strategies.registry"),
}

#: Imports forbidden although they point down: the production path (the strategies and their
#: runtime) never imports the emulator; emulation reaches it only through the hooks
#: ``tf_hetero.emulate()`` installs (``tf_hetero/hooks.py``). The profile grammar is pure
#: data and may be read anywhere.
#: The adapter is the lowest TensorFlow layer (it imports nothing of ours but the base), so
#: that every TF-facing module can use it; the pure engine and policies never do.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "tf_hetero.strategies": ("tf_hetero.emulation.device", "tf_hetero.emulation.ps"),
    "tf_hetero.engine": ("tf_hetero.tfcompat",),
    "tf_hetero.policies": ("tf_hetero.tfcompat",),
}

#: Imports of TensorFlow's and tf_keras's private modules.
PRIVATE_MODULES = ("tensorflow.python", "tf_keras.src", "keras.src")
ADAPTER = "tf_hetero.tfcompat"
ENV_MODULE = "tf_hetero.env"


def sources(repo: str = REPO) -> Mapping[str, str]:
    """Module name -> source text, for every module of the installed packages (a package's
    ``__init__`` ends in ``/``). Read once per session: the tree does not change during it
    (a test that doctors it copies this first)."""
    return _sources(repo)


@functools.lru_cache(maxsize=None)
def _sources(repo: str) -> Mapping[str, str]:
    out = {}
    for package, folder in ROOTS.items():
        top = os.path.join(repo, folder)
        for here, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
            rel = os.path.relpath(here, top)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            if prefix != package and any(prefix == p or prefix.startswith(p + ".")
                                         for p in ROOTS if p != package and len(p) > len(package)):
                continue  # a sub-package mapped from its own folder (strategies/ under tf_hetero)
            for name in files:
                if name.endswith(".py"):
                    mod = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
                    with open(os.path.join(here, name), encoding="utf-8") as f:
                        out[mod + ("/" if name == "__init__.py" else "")] = f.read()
    return types.MappingProxyType(out)


def modules(repo: str = REPO) -> list[str]:
    """Every module of the installed packages, by name, sorted."""
    return sorted(key.rstrip("/") for key in sources(repo))


def is_package(module: str, repo: str = REPO) -> bool:
    return module + "/" in sources(repo)


@functools.lru_cache(maxsize=None)
def nodes(text: str) -> tuple[ast.AST, ...]:
    """Every node of the parsed ``text`` (parsed once per distinct text)."""
    return tuple(ast.walk(ast.parse(text)))


def _imports(module: str, text: str) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    """``(imported module, line, imported names)`` for every import statement, at any depth."""
    return _cached_imports(module, text)


@functools.lru_cache(maxsize=None)
def _cached_imports(module: str, text: str):
    return tuple(_each_import(module, text))


def _each_import(module: str, text: str) -> Iterable[tuple[str, int, tuple[str, ...]]]:
    is_package = module.endswith("/")
    module = module.rstrip("/")
    for node in nodes(text):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                if not is_package:
                    parts = parts[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield base, node.lineno, tuple(a.name for a in node.names)


def _resolve(name: str, modules: set[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def graph(srcs: Mapping[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Module -> the package modules it imports (with the line)."""
    modules = {m.rstrip("/") for m in srcs}
    out: dict[str, list[tuple[str, int]]] = {}
    for key, text in srcs.items():
        mod = key.rstrip("/")
        edges = []
        for base, line, names in _imports(key, text):
            if not base.startswith("tf_hetero"):
                continue
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            if len(targets) < len(names) or not names:  # names from the module itself
                targets.append(base)
            for t in targets:
                r = _resolve(t, modules)
                if r and r != mod:
                    edges.append((r, line))
        out[mod] = edges
    return out


def _prefix(module: str, prefixes: Iterable[str]) -> str | None:
    best = None
    for p in prefixes:
        if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best)):
            best = p
    return best


def layer_of(module: str) -> int:
    found = [(len(p), i) for i, (_, ps) in enumerate(LAYERS) for p in ps
             if module == p or module.startswith(p + ".")]
    if not found:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to "
                             "docs/ARCHITECTURE.md's table).")
    return max(found)[1]


def upward_imports(srcs: Mapping[str, str]) -> list[str]:
    bad = []
    for mod, edges in graph(srcs).items():
        here = layer_of(mod)
        only = ONLY.get(_prefix(mod, ONLY) or "")
        for target, line in edges:
            if layer_of(target) > here:
                bad.append(f"{mod}:{line} imports {target} "
                           f"({LAYERS[here][0]} -> {LAYERS[layer_of(target)][0]}: upward)")
            elif only is not None and _prefix(target, only) is None:
                bad.append(f"{mod}:{line} imports {target} (outside what "
                           f"{_prefix(mod, ONLY)} may import: {', '.join(only)})")
            forbidden = FORBIDDEN.get(_prefix(mod, FORBIDDEN) or "", ())
            if _prefix(target, forbidden):
                bad.append(f"{mod}:{line} imports {target} (forbidden: see FORBIDDEN)")
    return sorted(bad)


def cycles(srcs: Mapping[str, str]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each sorted."""
    edges = {m: sorted({t for t, _ in e}) for m, e in graph(srcs).items()}
    # A package's __init__ re-exporting its modules is not a cycle with them: a module
    # importing its own package's names goes through the package; that edge is kept, the
    # package -> its own module edge is not counted.
    edges = {m: [t for t in ts if not t.startswith(m + ".")] for m, ts in edges.items()}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def private_reaches(srcs: Mapping[str, str]) -> list[str]:
    """Imports of TF's/tf_keras's private modules and ``protected-access`` pragmas outside
    the adapter."""
    bad = []
    for key, text in srcs.items():
        mod = key.rstrip("/")
        if _prefix(mod, (ADAPTER,)):
            continue
        for base, line, _ in _imports(key, text):
            if _prefix(base, PRIVATE_MODULES):
                bad.append(f"{mod}:{line} imports {base}")
        for i, row in enumerate(text.splitlines(), 1):
            if "protected-access" in row:
                bad.append(f"{mod}:{i} {row.strip()[:90]}")
        # getattr(x, "_name"), hasattr, setattr: a private name reached by its string.
        for node in nodes(text):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr", "setattr", "delattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str) \
                    and _private_name(node.args[1].value):
                bad.append(f"{mod}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return sorted(bad)


def _private_name(name: str) -> bool:
    """A single-underscore name that is not one of tf-hetero's own marks (``_tf_hetero*``)."""
    return name.startswith("_") and not name.startswith(("__", "_tf_hetero"))


def environment_reads(srcs: Mapping[str, str]) -> list[str]:
    """``os.environ`` / ``os.getenv`` / ``os.putenv`` outside :data:`ENV_MODULE`."""
    bad = []
    for key, text in srcs.items():
        mod = key.rstrip("/")
        if mod == ENV_MODULE:
            continue
        for node in nodes(text):
            name = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "os" and node.attr in ("environ", "getenv", "putenv"):
                name = f"os.{node.attr}"
            elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                    a.name in ("environ", "getenv", "putenv") for a in node.names):
                name = "from os import environ"
            if name:
                bad.append(f"{mod}:{node.lineno} {name}")
    return sorted(bad)


#: The pure modules: they never import TensorFlow or tf_keras (tests/test_doctests.py imports
#: each in a fresh interpreter and checks), so the engine and its policies can be read, tested
#: and simulated without it. Prefixes, as in :data:`LAYERS`: whole layers (the engine, the
#: policies, telemetry, the simulator) and the pure modules of the others.
PURE: tuple[str, ...] = (
    "tf_hetero.engine", "tf_hetero.policies", "tf_hetero.telemetry", "tf_hetero.sim",
    "tf_hetero.env", "tf_hetero.patching", "tf_hetero.tflogs",
    "tf_hetero.cluster.tf_config", "tf_hetero.cluster.reach", "tf_hetero.emulation.profile",
    "tf_hetero.strategies.config", "tf_hetero.strategies.registry",
    "tf_hetero.strategies.runtime.tags",
    "tf_hetero.tools.tfjob", "tf_hetero.tools.sim", "tf_hetero.tools.scenarios",
    "tf_hetero.tools.benchconfig", "tf_hetero.tools.report", "tf_hetero.tools.train_casp",
)


def pure_modules(repo: str = REPO) -> list[str]:
    """Every module that :data:`PURE` covers."""
    return [m for m in modules(repo) if _prefix(m, PURE)]


def has_examples(module: str, repo: str = REPO) -> bool:
    """True if ``module``'s source holds an interactive example (a ``>>>`` line)."""
    text = sources(repo)[module + ("/" if is_package(module, repo) else "")]
    return any(line.lstrip().startswith(">>> ") for line in text.splitlines())
