"""The ``tfinit`` console script's entry point, outside the ``tfinit`` package.

``import tfinit`` imports Keras and, on the TensorFlow backend, TensorFlow (seconds, and
TensorFlow's start-up log lines). Asking for help needs neither: ``tfinit``, ``tfinit -h``
and ``tfinit COMMAND --help`` print the usage from ``tfinit/cli.py`` read on its own (its
top level imports only the standard library), without importing the package. Every other
command line goes to :func:`tfinit.cli.main`.
"""

import importlib.util
import os
import sys

_HELP = {"-h", "--help"}


def _wants_help(argv):
    return not argv or any(arg in _HELP for arg in argv)


def _parser_alone():
    """``tfinit/cli.py`` loaded as a module of its own, ``tfinit/__init__`` not run."""
    package = importlib.util.find_spec("tfinit")
    path = os.path.join(package.submodule_search_locations[0], "cli.py")
    spec = importlib.util.spec_from_file_location("_tfinit_cli_usage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    """Run the ``tfinit`` command; returns its exit status (see :func:`tfinit.cli.main`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if _wants_help(argv):
        return _parser_alone().main(argv)  # prints the usage; imports no Keras
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow starts: no log lines
    from tfinit.cli import main as run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
