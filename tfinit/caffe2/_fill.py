"""Caffe2 fill operators replayed with tfinit's fills: ``fill`` and ``load_init_net``.

Arguments follow Caffe2's conventions (docs/caffe2-semantics.md): ``tfinit.caffe2._fill_args``
reads them as Caffe2 does and applies FillerOp's shape rules; ``tfinit.caffe2._fill_ops``
turns each operator into a tfinit fill. This module runs one operator (``fill``) or every
operator of an init net in order (``load_init_net``), with Caffe2's seeds and the memory
limit, and registers ``load_init_net`` as the init_net reader of ``tfinit.sources``.
"""

import os

import keras
import numpy as np

from tfinit import sources
from tfinit.caffe2._types import DATA_TYPES, NUMPY_DTYPES, DataType, data_type  # noqa: F401 (re-exported)
from tfinit.caffe2._fill_args import OpCall
from tfinit.caffe2._fill_ops import OPS, RANDOM_OPS, accepted_args, supported_ops  # noqa: F401 (re-exported)
from tfinit.caffe2._memory import Limit, size_text
from tfinit.caffe2._netdef import NetDef, make_arg, read_netdef
from tfinit.caffe2._progress import Progress, check_verbose


def _run(op_type, inputs, args, seed, caffe2_rng, limit):
    if op_type not in OPS:
        raise ValueError(f"Unknown or unsupported Caffe2 operator {op_type!r}; tfinit "
                         f"replays: {', '.join(supported_ops())}.")
    arrays = []
    for value in inputs:
        if keras.ops.is_tensor(value):
            value = keras.ops.convert_to_numpy(value)
        arrays.append(np.asarray(value))
    return OPS[op_type][0](OpCall(op_type, arrays, args, seed, caffe2_rng, limit))


def fill(op_type, *inputs, seed=None, max_bytes=None, **args):
    """Run one Caffe2 fill operator with Caffe2's argument conventions; a numpy array.

    ``inputs`` are arrays for the ops that take them (shape sources, FloatToHalf /
    HalfToFloat, UniqueUniformFill's ``avoid`` as input 1, UniformFill's min/max
    blobs). ``seed`` is the op's ``DeviceOption.random_seed``: random ops then use
    Caffe2's own CPU stream (``rng="caffe2"``); ``None`` draws fresh values.
    ``dtype`` is a ``TensorProto.DataType`` int or name. Unknown argument names raise
    ``TypeError`` (Caffe2 would silently ignore them). An output larger than the memory
    available is refused before it is allocated.

    Args:
        op_type: the Caffe2 operator type (``replayed_ops()`` lists them).
        *inputs: the operator's input arrays, for the operators that take them.
        seed: Caffe2's ``random_seed``, an int in ``[0, 2**32)``, or ``None``.
        max_bytes: the most bytes the output may take; ``None``: the memory available
            (``MemAvailable`` on Linux, within a cgroup's limit). Pass a larger int to
            allow more.
        **args: the operator's Caffe2 arguments (``shape``, ``values``, ``min``, ...).

    Returns:
        A numpy array: what the Caffe2 operator writes to its output blob.

    Raises:
        TypeError: an unknown argument name, a value in the wrong Caffe2 field (an int
            where Caffe2 reads a float), or a bad ``seed``.
        ValueError: an unknown operator, arguments Caffe2 refuses (its message quoted), or
            an output over ``max_bytes`` (the message gives the bytes it needs).

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2 import fill
    >>> fill("GivenTensorIntFill", shape=[2, 2], values=[1, 2, 3, 4]).tolist()
    [[1, 2], [3, 4]]
    >>> fill("UniformFill", shape=[3], min=-1.0, max=1.0, seed=3).astype(float).round(4).tolist()
    [-0.9915, -0.7889, -0.4283]
    >>> fill("FloatToHalf", np.array([65519.0, 65520.0], np.float32)).tolist()
    [65504.0, inf]
    >>> fill("XavierFill", shape=[1000000, 1000000])  # refused before allocating
    Traceback (most recent call last):
    ...
    ValueError: XavierFill: its float32 output of shape [1000000, 1000000] needs 4000000000000...
    """
    if not isinstance(op_type, str):
        raise TypeError("fill: Argument `op_type` must be a Caffe2 operator name. "
                        f"Received: op_type={op_type!r}.")
    limit = Limit(max_bytes, op_type)
    if op_type not in OPS:
        _run(op_type, (), {}, None, False, limit)
    accepted = accepted_args(op_type)
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise TypeError(f"{op_type}: unexpected argument(s) {', '.join(unknown)}; "
                        f"{op_type} takes {', '.join(accepted) or 'no arguments'}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or not 0 <= seed < 2**32):
        raise TypeError(f"{op_type}: Argument `seed` (Caffe2's random_seed) must be an int "
                        f"in [0, 2**32). Received: seed={seed!r}.")
    typed = {}
    for name, value in args.items():
        if name == "dtype":
            typed[name] = data_type(value, op_type)
            continue
        try:
            typed[name] = make_arg(name, value)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{op_type}: {err}") from None
    return _run(op_type, inputs, typed, None if seed is None else int(seed), seed is not None,
                limit)


# ---------------------------------------------------------------- init nets


def _caffe2_seed(net, op, seeds):
    output = op.outputs[0] if op.outputs else None
    if seeds and output in seeds:
        return seeds[output]
    for option in (op.device_option, net.device_option):
        # Caffe2 merges the net's device_option into each op's, the op's fields winning.
        if option is not None and option.random_seed is not None:
            return option.random_seed
    return None


def read_with_progress(source, verbose):
    """``read_netdef(source)``, with a ``keras.utils.Progbar`` over the bytes of a file or
    bytes at ``verbose=1`` (a NetDef is not read: no bar)."""
    if verbose == 0 or isinstance(source, NetDef):
        return read_netdef(source)
    shown = {}

    def report(done, total):
        if "bar" not in shown:  # the size is known once the file is read
            unit, scale = next((u, s) for u, s in (("MB", 10**6), ("kB", 10**3), ("B", 1))
                               if total >= 10 * s or s == 1)
            where = (os.fspath(source) if isinstance(source, (str, os.PathLike))
                     else "the given bytes")
            shown["bar"] = Progress(verbose, f"Reading {where}: {size_text(total)}",
                                    -(-total // scale), unit)
            shown["scale"] = scale
        scale = shown["scale"]  # the bar finishes when the read does, not before
        shown["bar"].update(done // scale if done < total else -(-total // scale))

    return read_netdef(source, progress=report)


def load_init_net(source, seed=None, seeds=None, *, max_bytes=None, verbose=0):
    """``{blob: numpy array}`` from replaying every op of a Caffe2 init net in order.

    ``source``: a path, bytes or NetDef. An op whose ``device_option.random_seed`` is
    set (its own or the net's, which Caffe2 applies to every op), or whose output
    blob is a key of ``seeds``, draws from Caffe2's own stream with that seed.
    Other random ops draw fresh values, or, with an int ``seed``, reproducible
    Keras-stream values (a distinct seed per op, derived from ``seed`` and the op's
    position). Arguments an op does not read are ignored, as in Caffe2.

    A model file is untrusted input: an op whose output would take the init net's blobs
    past ``max_bytes`` (by default the memory available when the replay starts) is
    refused before it is allocated. Values a file holds (GivenTensor*Fill) are already
    read, and not counted.

    Args:
        source: a ``.pb`` path, its bytes, or a ``tfinit.caffe2.NetDef``.
        seed: ``None`` (fresh values) or an int for reproducible Keras-stream values of the
            ops Caffe2 would not have seeded.
        seeds: ``{blob: int}``: Caffe2 seeds for the ops writing these blobs.
        max_bytes: the most bytes the replayed blobs may take together; ``None``: the
            memory available (``MemAvailable`` on Linux, within a cgroup's limit). Pass
            a larger int to allow more.
        verbose: ``0`` (silent), ``1`` (a ``keras.utils.Progbar`` while the file is read
            and while its ops are replayed) or ``2`` (one line each when done), as in
            Keras's ``fit``.

    Returns:
        A dict of blob name -> numpy array, in the order the ops write them.

    Raises:
        TypeError: a bad ``seed``/``seeds`` value, or an op argument in the wrong field.
        KeyError: ``seeds`` names a blob no op writes.
        ValueError: an op tfinit does not replay, an input no earlier op writes,
            arguments Caffe2 refuses, or an output over the memory limit (with the bytes
            it needs); the message names the op and its position.

    Example:

    >>> from tfinit.caffe2 import NetDef, Operator, load_init_net
    >>> net = NetDef(ops=[
    ...     Operator("ConstantFill", (), ("fc_b",), {"shape": [2], "value": 0.5}),
    ...     Operator("XavierFill", (), ("fc_w",), {"shape": [2, 3]}),
    ... ])
    >>> blobs = load_init_net(net, seeds={"fc_w": 1})
    >>> blobs["fc_b"].tolist(), blobs["fc_w"].shape
    ([0.5, 0.5], (2, 3))
    >>> blobs["fc_w"].astype(float).round(4).tolist()  # Caffe2's stream for random_seed=1
    [[0.5153, -0.4414, -0.1939], [0.4694, -0.9414, 0.5997]]
    """
    verbose = check_verbose(verbose, "load_init_net")
    limit = Limit(max_bytes, "load_init_net")
    net = read_with_progress(source, verbose)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError("load_init_net: Argument `seed` must be an int or None. "
                        f"Received: seed={seed!r}.")
    seeds = dict(seeds or {})
    produced = {out for op in net.ops for out in op.outputs}
    for blob, value in seeds.items():
        if blob not in produced:
            raise KeyError(f"load_init_net: Argument `seeds` names blob {blob!r}, which no "
                           f"op of the init net writes; blobs: {', '.join(sorted(produced)[:10])}.")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"load_init_net: Argument `seeds` must map blobs to ints. "
                            f"Received: seeds[{blob!r}]={value!r}.")
    blobs = {}
    bar = Progress(verbose, f"Replaying the {len(net.ops)} ops of init net "
                   f"{net.name or '(unnamed)'!r}", len(net.ops), "op")
    for index, op in enumerate(net.ops):
        where = f"init net op #{index} ({op.type or '<no type>'} -> {', '.join(op.outputs)})"
        if op.type not in OPS:
            raise ValueError(f"{where}: {op.type!r} is not an operator tfinit replays; "
                             f"supported: {', '.join(supported_ops())}.")
        if len(op.outputs) != 1:
            raise ValueError(f"{where}: a fill op writes exactly one blob, this one "
                             f"{len(op.outputs)}.")
        missing = [name for name in op.inputs if name not in blobs]
        if missing:
            raise ValueError(f"{where}: input(s) {', '.join(missing)} are not written by an "
                             "earlier op of the init net.")
        op_seed, caffe2_rng = _caffe2_seed(net, op, seeds), True
        if op_seed is None and seed is not None:
            op_seed = int(np.random.SeedSequence([int(seed), index]).generate_state(1)[0])
            caffe2_rng = False
        try:
            blobs[op.outputs[0]] = _run(
                op.type, [blobs[name] for name in op.inputs], op.args, op_seed, caffe2_rng,
                limit,
            )
        except (ValueError, TypeError) as err:
            raise type(err)(f"{where}: {err}") from None
        bar.update(index + 1)
    return blobs


def holds_only_fill_ops(net):
    """Whether the NetDef ``net`` has ops and every one is a fill op tfinit replays: an init
    net, when it was given where a predict net goes (the two files swapped)."""
    return bool(net.ops) and all(op.type in OPS for op in net.ops)


# ExternalInitializer reads init_nets through tfinit.sources, which sits below this package.
sources.register_init_net_reader(load_init_net)
