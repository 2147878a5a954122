"""The folders of src/reltrain are the layers (shared/DESIGN.md, docs/architecture.md), checked
on every import statement, function-level imports included: each imports only downwards, the
whole graph has no circle, and one module is rank-aware."""

import ast
from pathlib import Path

import reltrain

ROOT = Path(reltrain.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(path): path for path in ROOT.rglob("*.py")}


def _target(name: str) -> str | None:
    """The module of reltrain that ``name`` (a module, or a name imported from one) is in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports() -> dict[str, set[str]]:
    """Each module's imports of other modules of reltrain, function-level imports included."""
    found = {}
    for module, path in MODULES.items():
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[module] = {t for n in names if n.startswith("reltrain") and (t := _target(n))} - {module}
    return found


def _all_imports() -> dict[str, set[str]]:
    """Every imported name, reltrain's or not (for torch.distributed)."""
    found = {}
    for module, path in MODULES.items():
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[module] = names
    return found


# shared/DESIGN.md's layout: each folder one layer, lowest first. A module imports its own
# folder and the layers below it; two folders of one layer import neither each other.
LAYERS = {
    "reltrain.runtime": 1,
    "reltrain.data": 2, "reltrain.models": 2,
    "reltrain.config": 3,
    "reltrain.artifacts": 4, "reltrain.evaluation": 4,
    "reltrain.training": 5, "reltrain.inference": 5,
    "reltrain.commands": 6,
    "reltrain.cli": 7, "reltrain": 7, "reltrain.__main__": 8,
}


def _folder(module: str) -> str:
    found = [prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")]
    return max(found, key=len)


def test_the_folders_are_the_layers_and_import_only_downwards():
    imports = _imports()
    upward = {module: sorted(n for n in names if _folder(n) != _folder(module)
                             and LAYERS[_folder(n)] >= LAYERS[_folder(module)]
                             and n != "reltrain")  # a submodule's import loads the package
              for module, names in imports.items()}
    assert {m: n for m, n in upward.items() if n} == {}


def test_the_import_graph_has_no_circle():
    """Over every module, not only between layers: strongly connected components of one."""
    graph = {m: {n for n in names if n != "reltrain"} for m, names in _imports().items()}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_the_model_code_never_imports_the_distributed_package():
    models = {m: n for m, n in _all_imports().items() if m.startswith("reltrain.models")}
    assert not any(n.startswith(("torch.distributed", "reltrain.runtime.distributed"))
                   for names in models.values() for n in names)


def test_one_module_is_rank_aware():
    users = {m: sorted(n for n in names if n.startswith("torch.distributed"))
             for m, names in _all_imports().items() if any(n.startswith("torch.distributed")
                                                            for n in names)}
    assert set(users) == {"reltrain.runtime.distributed", "reltrain.runtime.launch"}, users
    assert all(n.startswith("torch.distributed.") for n in users["reltrain.runtime.launch"])


def test_no_function_over_60_lines_and_no_file_over_400():
    long_functions, long_files = set(), set()
    for path in ROOT.rglob("*.py"):
        name = str(path.relative_to(ROOT.parent))
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > 400:
            long_files.add(name)
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.end_lineno - node.lineno + 1 > 60):
                long_functions.add(f"{name}:{node.name}")
    assert not long_functions and not long_files, (sorted(long_functions), sorted(long_files))


LAUNCHER_VARIABLES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                      "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_RESTART_COUNT"}


def test_launcher_variables_are_read_only_by_the_distributed_module_and_the_launcher():
    readers = {}
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        names = {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str)
                 and (node.value in LAUNCHER_VARIABLES or node.value.startswith("SLURM_"))}
        if names:
            readers[module] = names
    assert set(readers) <= {"reltrain.runtime.distributed", "reltrain.runtime.launch"}, readers
    assert "RANK" in readers["reltrain.runtime.launch"]
    assert "SLURM_PROCID" in readers["reltrain.runtime.distributed"]


def test_a_function_level_import_of_reltrain_says_why():
    """Issue 45: reltrain's own code is imported at a module's top unless start-up (or a test
    that replaces it) needs it later, and then a comment on or above the line says so."""
    silent = []
    for path in sorted(ROOT.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("reltrain"):
                    said = "#" in lines[sub.end_lineno - 1] or lines[sub.lineno - 2].strip().startswith("#")
                    if not said:
                        silent.append(f"{path.relative_to(ROOT)}:{sub.lineno}")
    assert not silent, silent
