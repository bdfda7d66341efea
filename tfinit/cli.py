"""The ``tfinit`` command. Bad arguments exit non-zero with one line, no traceback."""

import argparse
import importlib.util
import inspect
import os
import sys
from pathlib import Path


class UsageError(Exception):
    """A user mistake: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _ops(args):
    from tfinit import registry

    for name in registry.fill_ops():
        cls = registry.lookup(name)
        params = [
            str(p) for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"
        ]
        print(f"{name}({', '.join(params)})")
        print(f"    {cls.formula}")
        doc = (cls.__doc__ or "").strip().splitlines()
        if doc:
            print(f"    {doc[0]}")
    return 0


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a positive {kind.__name__}, got {text!r}"
            ) from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
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


def _inspect(args):
    from tfinit.caffe2 import _cli

    return _cli.inspect(args.file, seed=args.seed, init_net=args.init_net, error=UsageError)


def _convert(args):
    from tfinit.caffe2 import _cli

    return _cli.convert(
        args.init_net, args.predict_net, args.output, args.input_shape, error=UsageError,
        input_format=args.input_format, check=args.check, rtol=args.rtol,
    )


def build_parser():
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
        "--epochs", type=_positive(int), default=20, help="epochs per run (default 20)"
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
        "--lr", type=_positive(float), default=0.01, help="SGD learning rate (default 0.01)"
    )
    demo.add_argument(
        "--samples",
        type=_positive(int),
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
        "--check",
        metavar="FORWARD.npz",
        default=None,
        help="run the model on the file's input/<blob> arrays and compare every blob/<blob> "
        "(max abs/rel error); exit status 1 when one diverges",
    )
    convert.add_argument(
        "--rtol", type=_positive(float), default=1e-4, help="relative tolerance (default 1e-4)"
    )
    convert.set_defaults(run=_convert)

    ops = commands.add_parser(
        "ops", help="list every Caffe2 fill operator with its arguments and maths"
    )
    ops.set_defaults(run=_ops)
    return parser


def main(argv=None):
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
