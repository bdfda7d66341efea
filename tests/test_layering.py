"""Imports go one way: a module imports only modules of a lower layer (no back-edges).

The layers of the fills, the registry, the initializer family and the Caffe2 fill replay,
lowest first. Each module's imports (also those inside functions) are read from its source.
"""

import ast

import pytest
from conftest import REPO

LAYERS = [
    # pure maths, names, checks and the backend switch: no tfinit imports
    ["_versions", "_backend", "_fans", "_caffe2_rng", "_caffe2_types", "_args", "registry",
     "_precision", "_keras_internals", "caffe2._large_floats", "caffe2._memory",
     "caffe2._progress"],
    # exact casts; the records and sources of values; Caffe2 NetDefs read and written
    ["_exact", "parameter_info", "sources", "_split_master", "caffe2._netdef"],
    # where create_param tracks its variables
    ["_init_net"],
    # the random streams; the Fill base class
    ["_streams", "_fill_base"],
    # the fills, by what varies
    ["constant_fills", "random_fills"],
    # the public re-export of every fill
    ["fills"],
    # the Caffe2 fill replay: one op call's arguments, the op table, the replay (which
    # registers its init_net reader with sources)
    ["caffe2._fill_args"],
    ["caffe2._fill_ops"],
    ["caffe2._fill"],
    # the Caffe2 initializer family
    ["initializers"],
]
RANK = {f"tfinit.{name}": rank for rank, names in enumerate(LAYERS) for name in names}
CHECKED = [name for names in LAYERS for name in names if name not in ("_keras_internals",
                                                                       "_precision",
                                                                       "caffe2._netdef")]


def _module_path(name):
    path = REPO / "tfinit" / (name.replace(".", "/") + ".py")
    return path if path.exists() else REPO / "tfinit" / name.replace(".", "/") / "__init__.py"


def tfinit_imports(name):
    """The tfinit modules that module ``tfinit.<name>`` imports, anywhere in its body."""
    tree = ast.parse(_module_path(name).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tfinit"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfinit"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if _exists(candidate) else node.module)
    return found


def _exists(module):
    path = REPO / (module.replace(".", "/") + ".py")
    return path.exists() or (REPO / module.replace(".", "/") / "__init__.py").exists()


@pytest.mark.parametrize("name", CHECKED)
def test_module_imports_only_lower_layers(name):
    rank = RANK[f"tfinit.{name}"]
    for imported in tfinit_imports(name):
        assert imported in RANK, f"tfinit.{name} imports {imported}, outside its layers"
        assert RANK[imported] < rank, f"tfinit.{name} imports {imported}: not a lower layer"


def test_sources_reach_nothing_above_them():
    # _keras_internals: the checkpoint object graph's proto, imported where a checkpoint is read
    assert tfinit_imports("sources") == {"tfinit._backend", "tfinit._keras_internals"}


def test_tensorflow_is_obtained_one_way_in_these_modules():
    # Only through tfinit._backend.tensorflow(feature); never `import tensorflow` here.
    for name in CHECKED:
        if name in ("_backend", "_versions", "sources"):
            continue  # the provider; the version check; the checkpoint object-graph proto
        tree = ast.parse(_module_path(name).read_text())
        for node in ast.walk(tree):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [m for m in modules if m.split(".")[0] == "tensorflow"], name
