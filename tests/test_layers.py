"""The package layers of docs/architecture.md, checked on every import statement (function-level
imports included): inference needs nothing of training, the shared modules need neither, and
one module is rank-aware."""

import ast
from pathlib import Path

import reltrain

ROOT = Path(reltrain.__file__).parent
SHARED = ("artifacts", "checkpoint_format", "children", "config", "config_checks", "distributed",
          "errors", "logs", "options", "output", "precision", "scoring", "stops")


def _imports() -> dict[str, set[str]]:
    found = {}
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[module] = names
    return found


def _reaching(imports: dict, prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    return {module: sorted(n for n in names if n.startswith(prefixes))
            for module, names in imports.items() if any(n.startswith(prefixes) for n in names)}


def test_the_layers_import_only_downwards():
    imports = _imports()
    upper = ("reltrain.training", "reltrain.inference", "reltrain.train_cmd", "reltrain.predict",
             "reltrain.evaluate", "reltrain.cli", "reltrain.inspect_cmd", "reltrain.compare_cmd",
             "reltrain.report_cmd")
    below = {m: n for m, n in imports.items()
             if m.startswith(("reltrain.data.", "reltrain.models."))
             or m in {f"reltrain.{name}" for name in SHARED}}
    assert _reaching(below, upper) == {}
    inference = {m: n for m, n in imports.items() if m.startswith("reltrain.inference.")}
    assert _reaching(inference, ("reltrain.training", "reltrain.train_cmd", "reltrain.predict",
                                 "reltrain.compare_cmd", "reltrain.report_cmd")) == {}


# docs/architecture.md's four layers; a module may import its own layer and those below it.
# errors.py and children.py stand under data/ (they import nothing else of reltrain).
LAYERS = {
    1: ("reltrain.cli", "reltrain.train_cmd", "reltrain.predict",
        "reltrain.evaluate", "reltrain.preprocess_cmd", "reltrain.inspect_cmd",
        "reltrain.compare_cmd", "reltrain.report_cmd", "reltrain.launch", "reltrain.__main__",
        "reltrain"),
    2: ("reltrain.training", "reltrain.inference"),
    3: ("reltrain.artifacts", "reltrain.checkpoint_format", "reltrain.scoring",
        "reltrain.distributed", "reltrain.stops", "reltrain.precision", "reltrain.config",
        "reltrain.config_checks", "reltrain.config_files", "reltrain.options", "reltrain.logs",
        "reltrain.output", "reltrain.examples"),
    4: ("reltrain.data", "reltrain.models", "reltrain.errors", "reltrain.children"),
}


def _layer(name: str) -> int | None:
    """The layer of a module or of a name imported from one (``reltrain.data.lm.X``)."""
    found = [(len(prefix), layer) for layer, prefixes in LAYERS.items() for prefix in prefixes
             if name == prefix or name.startswith(prefix + ".")]
    return max(found)[1] if found else None


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_ones():
    imports = _imports()
    assert [m for m in imports if _layer(m) is None] == []
    package = ("reltrain", "reltrain.__version__")  # what every submodule's import loads anyway
    upward = {module: sorted(n for n in names if n.startswith("reltrain") and n not in package
                             and (_layer(n) or 5) < _layer(module))
              for module, names in imports.items()}
    assert {m: n for m, n in upward.items() if n} == {}


def test_one_module_is_rank_aware():
    users = _reaching(_imports(), ("torch.distributed",))
    assert set(users) == {"reltrain.distributed", "reltrain.launch"}, users
    assert all(n.startswith("torch.distributed.") for n in users["reltrain.launch"])  # torchrun


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
    assert set(readers) <= {"reltrain.distributed", "reltrain.launch"}, readers
    assert "RANK" in readers["reltrain.launch"] and "SLURM_PROCID" in readers["reltrain.distributed"]
