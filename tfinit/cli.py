"""The ``tfinit`` command. Bad arguments exit non-zero with one line, no traceback.

``tfinit inspect NET.pb`` lists a Caffe2 NetDef's ops and, for an init net, its blobs;
``tfinit convert INIT.pb PREDICT.pb OUT.keras`` writes the Keras model of a Caffe2 net
(``--check FORWARD.npz`` compares it blob by blob with Caffe2); ``tfinit ops`` lists the
fill operators; ``tfinit demo`` trains one model in fp32, 16-bit and pseudo_fp16. Error
messages are one line in Keras's style ("Argument `--epochs` must be a positive int.
Received: --epochs=0"); ``tfinit COMMAND --help`` gives every option.
"""

import argparse
import importlib.util
import inspect
import os
import sys
from pathlib import Path


class UsageError(Exception):
    """A user mistake on the command line: :func:`main` prints it as one line, exit status 2.

    Raised for a bad option (by the parser and by the option types, whose messages name
    the option: "Argument `--max-bytes` must be ... Received: --max-bytes=5X") and for
    files the commands refuse (unreadable, malformed or unconvertible nets).

    Args:
        message: the one-line message, without the ``tfinit: error:`` prefix.

    Example:

    >>> from tfinit.cli import UsageError, build_parser
    >>> try:
    ...     build_parser().parse_args(["demo", "--epochs", "0"])
    ... except UsageError as err:
    ...     print(err)
    Argument `--epochs` must be a positive int. Received: --epochs=0
    """


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


#: the Keras initializer closest to each fill (what `tfinit ops` and the README table show)
NEAREST_KERAS = {
    "XavierFill": 'VarianceScaling(1.0, "fan_in", "uniform") (LeCun uniform, not Glorot)',
    "MSRAFill": 'VarianceScaling(2.0, "fan_out", "untruncated_normal")',
    "GaussianFill": "RandomNormal", "UniformFill": "RandomUniform", "ConstantFill": "Constant",
    "DiagonalFill": "Identity (no wrap)", "GivenTensorFill": "Constant(array)",
    "GivenTensorDoubleFill": "Constant(array)", "GivenTensorIntFill": "Constant(array)",
    "GivenTensorInt64Fill": "Constant(array)", "GivenTensorInt16Fill": "Constant(array)",
    "GivenTensorBoolFill": "Constant(array)",
}


def _ops(args):
    from tfinit.fills import registry

    for name in registry.fill_ops():
        cls = registry.lookup(name)
        params = [
            str(p) for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"
        ]
        print(f"{name}({', '.join(params)})")
        print(f"    {cls.formula}")
        print(f"    nearest Keras initializer: {NEAREST_KERAS.get(name, '-')}")
        doc = (cls.__doc__ or "").strip().splitlines()
        if doc:
            print(f"    {doc[0]}")
    return 0


def _positive(kind, flag):
    """The ``type`` of option ``flag``: a positive ``kind``; else a one-line UsageError
    (raised past argparse, whose "argument --x:" prefix would name the option twice)."""

    def parse(text):
        refusal = UsageError(f"Argument `{flag}` must be a positive {kind.__name__}. "
                             f"Received: {flag}={text}")
        try:
            value = kind(text)
        except ValueError:
            raise refusal from None
        if value <= 0:
            raise refusal
        return value

    return parse


def _writable_folder(path):
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".tfinit-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(
            f"output folder {str(folder)!r} is not writable ({err.strerror or err})"
        ) from None
    return folder


def _demo_needs():
    """The demo trains on TensorFlow and plots with matplotlib: a UsageError if either is off."""
    from tfinit import _backend

    try:
        _backend.tensorflow("tfinit demo")
    except RuntimeError as err:
        raise UsageError(str(err)) from None
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            "tfinit demo plots with matplotlib, which is not installed: "
            "pip install \"tfinit[demo]\" (or pip install matplotlib)"
        )


def _demo(args):
    from tfinit import demo

    _demo_needs()
    out = _writable_folder(args.out)
    demo.run(
        epochs=args.epochs,
        compute_dtype=args.dtype,
        out_dir=out,
        learning_rate=args.lr,
        samples=args.samples,
    )
    return 0


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def _byte_count(text):
    """``--max-bytes``: an int of bytes, or with a unit: 64G / 64GB (10**9), 64GiB (2**30)."""
    number = text.rstrip("BbIiKkMmGgTt")
    unit = text[len(number):].lower().removesuffix("b")
    try:
        value = int(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise UsageError(
            "Argument `--max-bytes` must be a number of bytes such as 68719476736, 64G or "
            f"64GiB. Received: --max-bytes={text}"
        ) from None
    if value <= 0:
        raise UsageError("Argument `--max-bytes` must be a positive number of bytes. "
                         f"Received: --max-bytes={text}")
    return value


def _progress(args):
    """Progress bars on stderr: --progress, --quiet, else when stderr is a terminal."""
    if args.progress is None:
        return sys.stderr.isatty()
    return args.progress


def _inspect(args):
    from tfinit.caffe2 import _cli

    return _cli.inspect(args.file, seed=args.seed, init_net=args.init_net, error=UsageError,
                        progress=_progress(args), max_bytes=args.max_bytes)


def _convert(args):
    from tfinit.caffe2 import _cli

    return _cli.convert(
        args.init_net, args.predict_net, args.output, args.input_shape, error=UsageError,
        input_format=args.input_format, check=args.check, rtol=args.rtol, atol=args.atol,
        progress=_progress(args), max_bytes=args.max_bytes, time_major=not args.batch_major,
    )


def _add_long_work_options(parser):
    """--progress / --quiet and --max-bytes, for the commands that read model files."""
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--progress", action="store_true", default=None,
                       help="progress bars on stderr (default: when stderr is a terminal)")
    shown.add_argument("--quiet", dest="progress", action="store_false",
                       help="no progress bars (for scripts)")
    parser.add_argument(
        "--max-bytes", type=_byte_count, default=None, metavar="BYTES",
        help="memory a file may make tfinit allocate, e.g. 64G (default: the memory "
        "available); larger fills or blobs are refused before anything is allocated",
    )


def build_parser():
    """The ``tfinit`` command's ``argparse`` parser: subcommands demo, inspect, convert, ops.

    Each subcommand sets ``run``, the function :func:`main` calls with the parsed
    arguments. A parse error raises :class:`UsageError` (argparse would exit instead).

    Returns:
        An ``argparse.ArgumentParser``.

    Example:

    >>> from tfinit.cli import build_parser
    >>> args = build_parser().parse_args(["convert", "init_net.pb", "predict_net.pb",
    ...                                   "model.keras", "--input-shape", "3,224,224"])
    >>> args.command, args.output, args.input_shape, args.rtol
    ('convert', 'model.keras', ['3,224,224'], 0.0001)
    """
    parser = _Parser(
        prog="tfinit",
        description="Caffe2's parameter-initialization semantics for TensorFlow / Keras.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = commands.add_parser(
        "demo",
        help="fine-tune one model in fp32, plain 16-bit, pseudo_fp16 (fp32 masters) and split; "
        "table + plot",
        description="Fine-tune the same small pretrained Keras MLP at a small learning rate "
        "four ways - fp32, 16-bit weights updated by a Keras optimizer, tfinit pseudo_fp16 with "
        "fp32 master weights, and (bfloat16) master='split', the bfloat16 copy plus an int16 "
        "remainder - then print a comparison table and write a PNG of the loss curves.",
    )
    demo.add_argument(
        "--epochs", type=_positive(int, "--epochs"), default=20, help="epochs per run (default 20)"
    )
    demo.add_argument(
        "--dtype",
        choices=["float16", "bfloat16"],
        default="bfloat16",
        help="16-bit compute dtype (default bfloat16, which adds the master='split' run)",
    )
    demo.add_argument(
        "--out", default="tfinit-demo", help="folder for loss_curves.png (default ./tfinit-demo)"
    )
    demo.add_argument(
        "--lr", type=_positive(float, "--lr"), default=0.01, help="SGD learning rate (default 0.01)"
    )
    demo.add_argument(
        "--samples",
        type=_positive(int, "--samples"),
        default=4096,
        help="synthetic training examples (default 4096)",
    )
    demo.set_defaults(run=_demo)

    inspect_ = commands.add_parser("inspect", help="list the ops and blobs of a Caffe2 NetDef .pb")
    inspect_.add_argument("file", help="init_net.pb / predict_net.pb (or .pbtxt)")
    inspect_.add_argument("--seed", type=int, default=None, help="seed for random fills")
    inspect_.add_argument(
        "--init-net",
        default=None,
        help="with a predict net: its init_net, to show parameter shapes",
    )
    _add_long_work_options(inspect_)
    inspect_.set_defaults(run=_inspect)

    convert = commands.add_parser("convert", help="Caffe2 init_net + predict_net -> .keras")
    convert.add_argument("init_net")
    convert.add_argument("predict_net")
    convert.add_argument("output", help="the .keras file to write")
    convert.add_argument(
        "--input-shape",
        action="append",
        help="per-example input shape, e.g. 3,224,224 (C,H,W); NAME=2,26 once per data "
        "input for a net with several (optional with --check: the file's inputs give it)",
    )
    convert.add_argument(
        "--input-format",
        choices=["channels_first", "channels_last"],
        default=None,
        help="layout of the model's image inputs/outputs (default: the net's order)",
    )
    convert.add_argument(
        "--batch-major",
        action="store_true",
        help="a net with a RecurrentNetwork: sequences [N, T, ...] and states [N, H] as "
        "keras.layers.LSTM has them, for fit (default: Caffe2's time-major [T, N, ...])",
    )
    convert.add_argument(
        "--check",
        metavar="FORWARD.npz",
        default=None,
        help="run the model on the file's input/<blob> arrays and compare every blob/<blob> "
        "(max abs/rel error); exit status 1 when one diverges",
    )
    convert.add_argument(
        "--rtol", type=_positive(float, "--rtol"), default=1e-4,
        help="relative tolerance (default 1e-4)",
    )
    convert.add_argument(
        "--atol", type=_positive(float, "--atol"), default=None,
        help="absolute tolerance (default: max(1e-5, 1e-4 * max|y|) per blob)",
    )
    _add_long_work_options(convert)
    convert.set_defaults(run=_convert)

    ops = commands.add_parser(
        "ops", help="list every Caffe2 fill operator with its arguments and maths"
    )
    ops.set_defaults(run=_ops)
    return parser


def main(argv=None):
    """Run the ``tfinit`` command line; returns the exit status.

    ``tfinit inspect`` prints a Caffe2 net's ops, then for an init net its blobs with their
    statistics, for a predict net whether ``to_keras`` converts it (``--init-net`` adds
    the parameters' shapes); ``tfinit convert`` writes a ``.keras`` file (``--check``
    compares it blob by blob with what Caffe2 computed); ``tfinit ops`` lists the fill
    operators; ``tfinit demo`` runs the mixed-precision demo. A bad argument or a file
    the command refuses prints one line, ``tfinit: error: ...``, to stderr (no
    traceback).

    Args:
        argv: the arguments, without the program name; ``None``: ``sys.argv[1:]``.

    Returns:
        The exit status: ``0``, ``1`` when ``convert --check`` finds a blob past the
        tolerance, ``2`` for a usage error or a refused file.

    Example:

    >>> from importlib import resources
    >>> from tfinit.cli import main
    >>> examples = resources.files("tfinit.caffe2") / "examples"  # nets made by Caffe2
    >>> main(["inspect", str(examples / "mlp_predict_net.pb"),
    ...       "--init-net", str(examples / "mlp_init_net.pb"), "--quiet"])
    net 'mlp_default_1': 6 ops
      external_input: data, fc1_w, fc1_b, fc2_w, fc2_b, fc3_w, fc3_b
      external_output: prob
    op #0 FC(data[1, 1], fc1_w[16, 10], fc1_b[16]) -> fc1 [order=b'NCHW', ...]
    ...
    op #5 Softmax(fc3) -> prob [order=b'NCHW', cudnn_exhaustive_search=0] engine=CUDNN
    convertible: yes
    blobs: not an init net of fill ops; shapes come from running the net
    0
    >>> main(["convert", "init_net.pb", "predict_net.pb", "model.h5"])  # one line on stderr
    2
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        return args.run(args)
    except UsageError as err:
        print(f"tfinit: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
