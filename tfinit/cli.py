"""The ``tfinit`` command. Bad arguments exit non-zero with one line, no traceback."""

import argparse
import inspect
import sys


class _UsageError(Exception):
    """A user mistake: printed as one line, exit status 2."""


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


def _inspect(args):
    from tfinit.caffe2 import _cli

    return _cli.inspect(args.file, seed=args.seed, init_net=args.init_net, error=_UsageError)


def _convert(args):
    from tfinit.caffe2 import _cli

    return _cli.convert(args.init_net, args.predict_net, args.output, args.input_shape,
                        error=_UsageError)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="tfinit",
        description="Caffe2's parameter-initialization semantics for TensorFlow / Keras.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ops = commands.add_parser("ops", help="list every Caffe2 fill operator with its arguments and maths")
    ops.set_defaults(run=_ops)
    inspect_ = commands.add_parser("inspect", help="list the ops and blobs of a Caffe2 NetDef .pb")
    inspect_.add_argument("file", help="init_net.pb / predict_net.pb (or .pbtxt)")
    inspect_.add_argument("--seed", type=int, default=None, help="seed for random fills")
    inspect_.add_argument("--init-net", default=None,
                          help="with a predict net: its init_net, to show parameter shapes")
    inspect_.set_defaults(run=_inspect)
    convert = commands.add_parser("convert", help="Caffe2 init_net + predict_net -> .keras")
    convert.add_argument("init_net")
    convert.add_argument("predict_net")
    convert.add_argument("output", help="the .keras file to write")
    convert.add_argument("--input-shape", required=True,
                         help="Caffe2's per-example input shape, e.g. 3,224,224 (C,H,W)")
    convert.set_defaults(run=_convert)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except _UsageError as err:
        print(f"tfinit {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
