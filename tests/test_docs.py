"""Every public name of ``tfinit`` has a Keras-style docstring, and its examples run.

The examples are doctests: each one is run here, so a docstring cannot drift from the
code. Examples of the names that create ``tf.Variable``s need the TensorFlow backend.
Beyond ``tfinit.__all__``: every name in ``tfinit.caffe2.__all__`` and
``tfinit.mixed_precision.__all__`` (TensorFlow only: the module refuses other backends),
``tfinit.cli``'s entry points and ``tfinit.sources.open_source``.
"""

import dataclasses
import doctest
import inspect

import pytest

import tfinit
import tfinit.caffe2

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

#: names whose examples create TensorFlow variables
NEEDS_TENSORFLOW = {
    "ExternalInitializer", "Initializer", "ParameterInfo", "PseudoFP16Initializer",
    "ReversePseudoFP16Initializer",
}
NAMES = sorted(n for n in tfinit.__all__ if not inspect.ismodule(getattr(tfinit, n)))
#: public names of submodules: all of tfinit.caffe2, the command line, tfinit.sources
CAFFE2 = sorted(tfinit.caffe2.__all__)
#: tfinit.mixed_precision.__all__, listed here: importing the module needs TensorFlow
#: (test_every_mixed_precision_name_is_covered checks the list against the module)
MIXED_PRECISION = sorted([
    "scope", "parameter_info", "MasterWeightOptimizer", "sync_copies", "get_master_weights",
    "set_master_weights", "save_weights", "EarlyStopping", "Caffe2MomentumSGD", "PairPolicy",
    "PseudoFP16Policy", "replica_mismatches",
])
#: submodules whose names need the TensorFlow backend
TENSORFLOW_MODULES = {"tfinit.mixed_precision"}
MORE = [("tfinit.caffe2", n) for n in CAFFE2] + [
    ("tfinit.cli", "main"), ("tfinit.cli", "build_parser"), ("tfinit.cli", "UsageError"),
    ("tfinit.sources", "open_source"),
] + [("tfinit.mixed_precision", n) for n in MIXED_PRECISION]


def _param(name):
    marks = [pytest.mark.tensorflow_only] if name in NEEDS_TENSORFLOW else []
    return pytest.param(name, marks=marks, id=name)


def _more_param(module, name):
    marks = [pytest.mark.tensorflow_only] if module in TENSORFLOW_MODULES else []
    return pytest.param(module, name, marks=marks, id=f"{module}.{name}")


def _takes_arguments(obj):
    if not callable(obj):
        return False
    function = obj.__init__ if inspect.isclass(obj) else obj
    params = inspect.signature(function).parameters
    return any(p not in ("self",) for p in params)


def _is_record(obj):
    """A dataclass, an exception class or a constant: Returns/Raises do not apply."""
    exception = inspect.isclass(obj) and issubclass(obj, BaseException)
    return dataclasses.is_dataclass(obj) or exception or not callable(obj)


def test_every_public_name_is_covered():
    assert len(NAMES) >= 23 and "get" in NAMES and "XavierFill" in NAMES
    assert len(CAFFE2) >= 24 and "DataType" in CAFFE2 and "Caffe2LSTM" in CAFFE2


@pytest.mark.tensorflow_only
def test_every_mixed_precision_name_is_covered():
    from tfinit import mixed_precision

    assert sorted(mixed_precision.__all__) == MIXED_PRECISION


@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_public_name_documents_its_contract_with_an_example(name):
    obj = getattr(tfinit, name)
    doc = inspect.getdoc(obj)
    assert doc and "Example:" in doc and ">>> " in doc, name
    if _takes_arguments(obj):
        assert "\nArgs:\n" in doc, name
    assert "\nReturns:\n" in doc or "\nRaises:\n" in doc, name


@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_public_name_examples_run(name):
    obj = getattr(tfinit, name)
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    assert tests and tests[0].examples, f"{name} has no doctest examples"
    failures = []
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    for test in tests:
        runner.run(test, out=failures.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(failures)


@pytest.mark.parametrize("module, name", [_more_param(m, n) for m, n in MORE])
def test_submodule_names_document_and_run_their_examples(module, name):
    import importlib

    obj = getattr(importlib.import_module(module), name)
    doc = inspect.getdoc(obj)
    assert doc and "Example:" in doc and ">>> " in doc, name
    assert "\nArgs:\n" in doc or not _takes_arguments(obj), name
    assert "\nReturns:\n" in doc or "\nRaises:\n" in doc or _is_record(obj), name
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    failures = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=failures.append)
    assert tests[0].examples and runner.summarize(verbose=False).failed == 0, "".join(failures)


def test_error_messages_say_received_not_got():
    """One error style in tfinit.caffe2, the command line and Caffe2MomentumSGD:
    "Argument `x` must be ... Received: x=...", never "..., got ..."."""
    import io
    import tokenize
    from pathlib import Path

    root = Path(tfinit.__file__).parent
    files = [*sorted((root / "caffe2").glob("*.py")), root / "cli.py",
             *sorted((root / "_caffe2_training").glob("*.py"))]
    found = []
    for path in files:
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        found += [f"{path.name}:{t.start[0]}" for t in tokens
                  if t.type == tokenize.STRING and "got " in t.string]
    assert not found, found


#: the guides whose ``python`` blocks run, in order, in one namespace (a block starting with
#: ``# Caffe2`` shows the original Caffe2 code and is not run)
GUIDES = ["porting.md"]


@pytest.mark.slow  # builds and fits small models
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("guide", GUIDES)
def test_guide_python_blocks_run(guide):
    import re
    from pathlib import Path

    text = (Path(tfinit.__file__).parent.parent / "docs" / guide).read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
              if not b.startswith("# Caffe2")]
    assert len(blocks) >= 5, guide
    namespace = {"__name__": f"docs_{guide}"}
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/{guide} block {k}", "exec"), namespace)  # noqa: S102
