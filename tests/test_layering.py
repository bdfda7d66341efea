"""Imports go one way: a module imports only modules of a lower layer (no back-edges).

Every module of tfinit has a layer, lowest first: the fills, the registry and the
initializer family with the Caffe2 fill replay, then the packages (``tfinit.mixed_precision``
and the Caffe2 conversion of ``tfinit.caffe2``) and what uses them. A package is one layer:
inside it, its private modules have layers of their own (lowest first) and the package
module sits on top. A module outside a package imports it through its package module only
(``tfinit.mixed_precision``, never ``tfinit.mixed_precision._common.pair_kinds``). Each
module's imports (also those inside functions) are read from its source.
"""

import ast

import pytest
from conftest import REPO

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it


def package(name, layers):
    """A package as one layer: its private modules' layers, lowest first, under the package
    module."""
    return {"package": name, "layers": [[f"{name}.{m}" for m in names] for names in layers]
            + [[name]]}


LAYERS = [
    # pure maths, names, checks and the backend switch: no tfinit imports
    ["_versions", "_backend", "_fans", "_args", "_precision", "_keras_internals",
     "_split_master",  # the split master's bit layout (its maths: in the next layer)
     "caffe2._types", "caffe2._large_floats", "caffe2._memory", "caffe2._op_args",
     "caffe2._progress"],
    # the records and sources of values; Caffe2 NetDefs read and written
    # (and master="stochastic"'s hash and rounding, in keras.ops)
    ["parameter_info", "sources", "_split_master.tensorflow", "_split_master.jax",
     "_stochastic_rounding",
     "caffe2._netdef", "caffe2._detection_args",
     "caffe2._detection_boxes"],
    # where create_param tracks its variables; the fill operators (one package)
    [
        "_init_net",
        # Caffe2's training pieces: LearningRate schedules, MomentumSGD (on every backend);
        # tfinit.caffe2 and tfinit.mixed_precision re-export them
        package("_caffe2_training", [["schedules", "momentum_sgd"]]),
        # tfinit.caffe2._detection names them with the other three
        "caffe2._box_with_nms_limit", "caffe2._roi_align",
        package("fills", [
            # exact casts; Caffe2's CPU streams in numpy; the op-name table
            ["_exact", "_caffe2_rng", "registry"],
            ["_streams", "_base"],  # the random streams; the Fill base class
            ["_constant", "_random"],  # the fills, by what varies
        ]),
    ],
    # the Caffe2 fill replay: one op call's arguments, the op table, the replay (which
    # registers its init_net reader with sources)
    ["caffe2._fill_args"],
    ["caffe2._fill_ops"],
    ["caffe2._fill"],
    # the Caffe2 initializer family
    ["initializers"],
    # the packages above the initializers, peers: neither imports the other
    [
        package("mixed_precision", [
            # the folders (_common: every backend; _tensorflow; _keras_variables: JAX and
            # torch), package modules without code but TensorFlow's backend check; the one
            # backend choice; the pair kinds' roles and the pairing rule; the active scopes;
            # weight files seen through conversions; what replica_mismatches reports; what
            # JAX and torch each do their own way (the same names in both)
            ["_common", "_tensorflow", "_keras_variables", "_backend_choice",
             "_common.pair_kinds", "_common.scope_stack", "_common.weight_files",
             "_common.replica_report", "_keras_variables.jax", "_keras_variables.torch"],
            # the layouts of masters sharded over a mesh axis (shard_over, ZeRO-1 on JAX);
            # int8 state's maps and blockwise quantization
            ["_keras_variables.shard_layouts", "_common.quantized_state"],
            # the layers' dtype policy; what MasterWeightOptimizer is on every backend;
            # JAX's or torch's differences, as the backend choice says
            ["_common.pair_policy", "_common.optimizer_core", "_keras_variables.active"],
            # what scope sets on the layers and models it constructs or loads;
            # TensorFlow's pair records; JAX/torch: the Keras variables of a pair, what
            # weight files store
            ["_common.scope_hooks", "_tensorflow.pair_records", "_keras_variables.paired_variables",
             "_keras_variables.save_hooks", "_tensorflow.quantized_slots",
             "_keras_variables.quantized_slots"],  # int8 state: the slot variables
            # TensorFlow: what save formats store, the Keras variables of a pair; JAX/torch:
            # the pair records, made from built layers (no variable creator)
            ["_tensorflow.save_hooks", "_tensorflow.paired_variables",
             "_keras_variables.pair_records"],
            # each backend's MasterWeightOptimizer step; each backend's steps of scope
            ["_tensorflow.optimizer", "_keras_variables.optimizer",
             "_tensorflow.scope_steps", "_keras_variables.scope_steps"],
            ["_chosen_backend"],  # the chosen backend's scope steps, optimizer step, pairs
            ["_optimizer"],  # MasterWeightOptimizer, once, over the chosen backend's step
            ["_scope"],  # scope, once, over the chosen backend's steps
            ["_master_weights", "_replicas"],  # the public functions over pairs (one path)
            ["_callbacks"],  # EarlyStopping reads the masters through _master_weights
        ]),
        # the Caffe2 conversion (its reading and fill replay are in the layers below)
        package("caffe2", [
            # Keras layers for ops (the detection ops' in _detection)
            ["_layers", "_lstm", "_constants", "_detection", "_generic_layers"],
            ["_shared"],  # one Keras weight for a blob several ops read
            ["_conv_form"],  # the layers of one Conv
            # the op handlers: classification; generic; detection
            ["_ops", "_generic_ops", "_detection_ops"],
            ["_plan", "_recurrent"],
            ["_spec"],  # one OpSpec per converted op type
            ["_keras", "_sequence"],  # weights into layers; batch-major sequences
            ["_to_keras"],
            ["_check"],
            ["_cli"],
        ]),
    ],
    # the model-wide ParameterInfo list (reads the pairs of tfinit.mixed_precision)
    ["_parameter_infos"],
    # helpers for tf.distribute
    ["distribute"],
    # the package module: the public names of tfinit
    ["__init__"],
    # the demo; the command line
    ["demo"],
    ["cli"],
]


def _module(name):
    """The dotted name of LAYERS entry ``name`` (``__init__``: the tfinit package)."""
    return "tfinit" if name == "__init__" else f"tfinit.{name}"


def _names(entry):
    """The modules of one entry of a layer: a module, or every module of a package."""
    return [entry] if isinstance(entry, str) else [n for names in entry["layers"] for n in names]


def _ranks():
    """``{module: (layer, package or None, layer inside the package)}``."""
    ranks = {}
    for layer, entries in enumerate(LAYERS):
        for entry in entries:
            if isinstance(entry, str):
                ranks[_module(entry)] = (layer, None, 0)
                continue
            for inner, names in enumerate(entry["layers"]):
                ranks.update({_module(name): (layer, entry["package"], inner) for name in names})
    return ranks


RANK = _ranks()
ALL = sorted(name for entries in LAYERS for entry in entries for name in _names(entry))
#: the fills, the registry, the initializer family and the Caffe2 fill replay (the layers up
#: to the initializers): TensorFlow through tfinit._backend only
CHECKED = [name for entries in LAYERS[:LAYERS.index(["initializers"]) + 1]
           for entry in entries for name in _names(entry)
           if name not in ("_keras_internals", "_precision", "caffe2._netdef")]


def _below(imported, importer):
    """Whether ``imported`` is in a lower layer than ``importer`` (inside one package: a
    lower layer of that package)."""
    low, high = RANK[imported], RANK[importer]
    if low[0] != high[0]:
        return low[0] < high[0]
    return low[1] is not None and low[1] == high[1] and low[2] < high[2]


#: the packages a module outside them imports through their package module (or a public
#: submodule of theirs, such as tfinit.fills.registry) only
PACKAGES = ("tfinit._caffe2_training", "tfinit.caffe2", "tfinit.fills",
            "tfinit.mixed_precision")
#: the private modules of a package that a module outside it imports, and why
THROUGH_PRIVATE = {
    # The command line is one job, split by package: tfinit.cli parses the command line and
    # runs the Caffe2 commands that tfinit.caffe2._cli implements (imported when one runs,
    # so `tfinit --help` imports no Keras). They are not API: tfinit.caffe2's public names
    # are its documented, doctested library (tests/test_docs.py).
    ("tfinit.cli", "tfinit.caffe2._cli"),
}
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
    return found - {_module(name)}


def _exists(module):
    path = REPO / (module.replace(".", "/") + ".py")
    return path.exists() or (REPO / module.replace(".", "/") / "__init__.py").exists()


def _package_of(module):
    return next((p for p in PACKAGES if module == p or module.startswith(p + ".")), None)


def test_every_module_has_a_layer():
    files = sorted((REPO / "tfinit").rglob("*.py"))
    modules = {".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
               for path in files}
    assert sorted(modules - set(RANK)) == [], "modules without a layer in LAYERS"
    assert sorted(set(RANK) - modules) == [], "LAYERS names modules that do not exist"
    assert len(ALL) == len(RANK), "a module is in two layers"


@pytest.mark.parametrize("name", ALL)
def test_module_imports_only_lower_layers(name):
    for imported in tfinit_imports(name):
        assert imported in RANK, f"{_module(name)} imports {imported}, outside its layers"
        assert _below(imported, _module(name)), (
            f"{_module(name)} imports {imported}: not a lower layer")


@pytest.mark.parametrize("name", ALL)
def test_packages_are_imported_through_their_package_module(name):
    importer = _module(name)
    for imported in tfinit_imports(name):
        pkg = _package_of(imported)
        # a public module of a package: no part of its name after the package's starts with
        # an underscore (tfinit.fills.registry; mixed_precision's _common/, _tensorflow/,
        # _keras_variables/ are private folders)
        inner = imported.removeprefix(f"{pkg}.").split(".")
        public = imported == pkg or not any(part.startswith("_") for part in inner)
        if pkg is None or public or pkg == _package_of(importer):
            continue
        assert (importer, imported) in THROUGH_PRIVATE, (
            f"{importer} imports {imported}, a private module of {pkg}: import {pkg} instead")


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


def test_every_module_stays_under_600_lines():
    """Small modules with one job: a module past 600 lines is split before it lands."""
    long = {str(p.relative_to(REPO)): n for p in sorted((REPO / "tfinit").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_mixed_precision_keeps_each_backend_in_its_folder():
    """TensorFlow only in tfinit.mixed_precision's _tensorflow/ (imported or asked for);
    no branch on torch but where the backend is chosen (its differences: _keras_variables/torch.py),
    none in a module named for JAX."""
    for name in ALL:
        if not name.startswith("mixed_precision") or name.startswith("mixed_precision._tensorflow"):
            continue
        source = _module_path(name).read_text()
        for node in ast.walk(ast.parse(source)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [m for m in modules if m.split(".")[0] == "tensorflow"], name
        assert "_backend.tensorflow(" not in source, name
        assert '"torch"' not in source or name.endswith((".active", "._backend_choice")), name
    assert "torch" not in (REPO / "tfinit/mixed_precision/_keras_variables/jax.py").read_text()


#: what asks which backend runs: the backend packages, tfinit's backend switch, the choice
BACKEND_ASKERS = ("tensorflow", "jax", "torch", "tfinit._backend",
                  "tfinit.mixed_precision._backend_choice")


def test_mixed_precision_common_asks_no_backend():
    """``tfinit.mixed_precision._common`` is what every backend shares: none of its modules
    imports a backend package, tfinit's backend switch or the backend choice, or asks
    ``keras.backend.backend()`` (the backend folders and ``_chosen_backend`` supply what
    differs)."""
    common = [n for n in ALL if n.startswith("mixed_precision._common")]
    assert len(common) >= 8
    for name in common:
        tree = ast.parse(_module_path(name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            else:
                continue
            asked = [m for m in modules
                     if m.split(".")[0] in BACKEND_ASKERS[:3]
                     or any(m == a or m.startswith(a + ".") for a in BACKEND_ASKERS[3:])]
            assert not asked, f"tfinit.{name} imports {asked}"
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and ast.unparse(node.func).endswith("backend.backend")]
        assert not calls, f"tfinit.{name} asks {ast.unparse(calls[0])}" if calls else ""


def test_scope_and_master_weight_optimizer_are_defined_once():
    """The public ``scope`` and ``MasterWeightOptimizer`` are written once (one docstring
    each), over the backend folders' steps; no backend folder defines either."""
    where = {"scope": [], "MasterWeightOptimizer": []}
    for name in ALL:
        if not name.startswith("mixed_precision"):
            continue
        for node in ast.parse(_module_path(name).read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in where:
                where[node.name].append(name)
    assert where == {"scope": ["mixed_precision._scope"],
                     "MasterWeightOptimizer": ["mixed_precision._optimizer"]}
