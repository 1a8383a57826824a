"""The package shape of docs/ARCHITECTURE.md: one import name (`arl`), who may import what,
and what `import arl` pulls in."""

import ast
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Bottom to top; a layer imports only itself and the layers before it (packages that share a
# level never import each other). "arl" is the core: the modules directly in arl/.
LAYERS = (("arl",), ("arl.model", "arl.envs"), ("arl.learner", "arl.rollout"),
          ("arl.actors",), ("arl.warmstart",), ("arl.app",))
PACKAGES = tuple(p for layer in LAYERS for p in layer)
SUBPACKAGES = tuple(p for p in PACKAGES if p != "arl")
HEAVY = ("ray", "vllm", "deepspeed", "wandb")


def _allowed(package: str) -> set[str]:
    for level, layer in enumerate(LAYERS):
        if package in layer:
            return {package, *(p for below in LAYERS[:level] for p in below)}
    raise KeyError(package)


def _layer_of(module: str) -> str | None:
    """The layer of a dotted module name: a subpackage of arl, the core, or None (not arl)."""
    if module != "arl" and not module.startswith("arl."):
        return None
    return next((p for p in SUBPACKAGES if module == p or module.startswith(p + ".")), "arl")


def _imports(path: pathlib.Path, full: bool = False) -> set[str]:
    """Modules `path` imports anywhere in its body (top-level names, or dotted with `full`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name if full else a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if full:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
            else:
                names.add(node.module.split(".")[0])
    return names


def _layers_imported(path: pathlib.Path) -> set[str]:
    return {layer for m in _imports(path, full=True) if (layer := _layer_of(m)) is not None}


def _sources(package: str) -> list[pathlib.Path]:
    folder = ROOT / package.replace(".", "/")
    if package == "arl":  # the core: the modules directly in arl/
        return sorted(folder.glob("*.py"))
    return sorted(folder.rglob("*.py"))


def _module(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def test_one_top_level_import_name():
    """The installed distribution adds one import name, arl (its metadata's top level), and
    the repository holds no other Python package beside it."""
    from importlib.metadata import distribution

    dist = distribution("arl")
    top = (dist.read_text("top_level.txt") or "").split()
    if not top:  # an editable install lists no top_level.txt: its files say it
        top = sorted({pathlib.PurePosixPath(str(f)).parts[0] for f in dist.files or []
                      if str(f).endswith(".py") and not str(f).startswith("__editable__")})
    assert top in (["arl"], []), top
    found = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    # examples/ is code a user would write, importable from the repository, not installed
    assert found == ["arl", "examples"], found
    entry = {ep.name: ep.value for ep in dist.entry_points}
    assert entry["arl"] == "arl.app.cli:main"
    assert all(v.startswith("arl.") for k, v in entry.items()), entry


def test_dependency_rule_without_exemptions():
    violations = []
    for package in PACKAGES:
        for path in _sources(package):
            for name in sorted(_layers_imported(path) - _allowed(package)):
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not violations, "dependency rule broken:\n" + "\n".join(violations)


def test_no_import_cycle():
    """No module reaches itself through the modules it imports (at any depth, lazy imports
    included): each package can be read bottom-up."""
    modules = {_module(p): p for package in PACKAGES for p in _sources(package)}
    graph = {name: {m for m in _imports(path, full=True) if m in modules and m != name}
             for name, path in modules.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep):] + [node, dep]
                                          if dep in path else [node, dep]))
            elif dep not in state:
                visit(dep, [*path, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_ray_only_in_actors():
    offenders = [
        str(path.relative_to(ROOT))
        for package in PACKAGES if package != "arl.actors"
        for path in _sources(package)
        if "ray" in _imports(path)
    ]
    assert not offenders, f"ray imported outside actors/: {offenders}"


def test_envs_import_no_torch():
    offenders = [
        str(p.relative_to(ROOT)) for p in _sources("arl.envs") if {"torch", "ray"} & _imports(p)
    ]
    assert not offenders


def test_import_arl_pulls_no_heavy_module():
    modules = [p.stem for p in _sources("arl") if p.stem != "__init__"]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('arl.' + m)\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_no_source_file_over_400_lines():
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for package in PACKAGES
        for p in _sources(package)
        if (n := len(p.read_text().splitlines())) > 400
    ]
    assert not long, long


def _long_definitions(kind: type, limit: int) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in _sources(package):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, kind) and node.end_lineno - node.lineno + 1 > limit:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                 f"({node.end_lineno - node.lineno + 1} lines)")
    return found


def test_no_class_over_150_lines():
    assert not (found := _long_definitions(ast.ClassDef, 150)), found


def test_no_function_over_60_lines():
    found = (_long_definitions(ast.FunctionDef, 60)
             + _long_definitions(ast.AsyncFunctionDef, 60))
    assert not found, found


# Words that name a game or its pieces: the core may use them in docstrings (examples), never
# in code or in the strings it shows.
GAME_WORDS = re.compile(r"tic.?tac.?toe|connect.?four|\b(square|column|board)s?\b",
                        re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the nodes that are docstrings (a module's, class's or function's first string)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _words(node: ast.AST) -> list[str]:
    """The names and string values a node carries (identifiers split at underscores)."""
    names = []
    if isinstance(node, ast.Name):
        names.append(node.id)
    elif isinstance(node, ast.Attribute):
        names.append(node.attr)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.append(node.name)
    elif isinstance(node, ast.arg):
        names.append(node.arg)
    elif isinstance(node, ast.keyword) and node.arg:
        names.append(node.arg)
    elif isinstance(node, ast.alias):
        names.append(node.asname or node.name)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return [n.replace("_", " ") for n in names]


def test_core_names_no_game():
    """Nothing in arl/ knows a game: no game's name or pieces in its code or its strings
    (docstrings may give examples). Games come in through arl.env_spec."""
    offenders = []
    for path in _sources("arl"):
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if id(node) in docs:
                continue
            for text in _words(node):
                if (found := GAME_WORDS.search(text)) is not None:
                    offenders.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')} "
                                     f"{found.group(0)!r} in {text[:60]!r}")
    assert not offenders, "game names in the core:\n" + "\n".join(offenders)
