"""The ``tfinit inspect`` and ``tfinit convert`` commands (Caffe2 nets).

With ``progress=True`` the library's ``verbose=1`` progress bars (``keras.utils.Progbar``)
go to stderr, so that stdout keeps only the report.
"""

import contextlib
import sys

import numpy as np

from tfinit.caffe2._fill import (RANDOM_OPS, holds_only_fill_ops, load_init_net,
                                 read_with_progress, supported_ops)
from tfinit.caffe2._netdef import NetDef, RawField

_USER_ERRORS = (ValueError, TypeError, KeyError, OSError)


def _short(value):
    if isinstance(value, np.ndarray):
        kind = "floats" if value.dtype.kind == "f" else "ints"
        if value.size <= 8:
            return f"{kind} {value.tolist()}"
        return f"{kind}[{value.size}]"
    if isinstance(value, list):
        return f"strings[{len(value)}]" if len(value) > 4 else repr(value)
    if isinstance(value, NetDef):
        return f"NetDef {value.name!r} ({len(value.ops)} ops)"
    if isinstance(value, RawField):
        return f"{value.field} (not decoded)"
    return repr(value)


def _stats(array):
    line = f"shape {list(array.shape)} dtype {array.dtype}"
    if array.dtype.kind in "biuf" and array.size:
        values = array.astype(np.float64)
        finite = values[np.isfinite(values)]
        if finite.size:
            line += (f" min {finite.min():.6g} max {finite.max():.6g} mean {finite.mean():.6g}"
                     f" std {finite.std():.6g}")
        if finite.size != values.size:
            line += f" non-finite {values.size - finite.size}"
    return line


def _to_stderr(progress):
    """Where the progress bars go: stderr (Keras's Progbar writes to sys.stdout)."""
    return contextlib.redirect_stdout(sys.stderr) if progress else contextlib.nullcontext()


def inspect(path, seed=None, init_net=None, error=ValueError, progress=False, max_bytes=None):
    """Print every op (type, blobs, args) and, for an init net, every blob's statistics.

    With ``init_net`` (for a predict net), parameter inputs are shown with their shapes.
    ``progress``: progress bars on stderr while a net is read and an init net replayed;
    ``max_bytes``: the replay's memory limit (``load_init_net``).
    """
    verbose = int(progress)
    try:
        with _to_stderr(progress):
            net = read_with_progress(path, verbose)
            params = {} if init_net is None else load_init_net(
                init_net, seed=seed, max_bytes=max_bytes, verbose=verbose)
    except _USER_ERRORS as err:
        raise error(str(err)) from None
    print(f"net {net.name!r}: {len(net.ops)} ops")
    if net.device_option is not None:
        print(f"  device_option: {net.device_option}")
    print(f"  external_input: {', '.join(net.external_input) or '-'}")
    print(f"  external_output: {', '.join(net.external_output) or '-'}")
    for k, op in enumerate(net.ops):
        args = ", ".join(f"{name}={_short(value)}" for name, value in op.args.items())
        inputs = [f"{b}{list(params[b].shape)}" if b in params else b for b in op.inputs]
        seed = getattr(op.device_option, "random_seed", None)
        inherited = getattr(net.device_option, "random_seed", None)
        seed_note = (f" random_seed={seed}" if seed is not None else
                     f" random_seed={inherited} (the net's)" if inherited is not None else "")
        where = (f" engine={op.engine}" if op.engine else "") + seed_note
        print(f"op #{k} {op.type}({', '.join(inputs)}) -> {', '.join(op.outputs)}"
              + (f" [{args}]" if args else "") + where)
    replayable = net.ops and all(op.type in supported_ops() for op in net.ops)
    if not replayable:
        _print_convertible(net, params, init_net is not None)
        print("blobs: not an init net of fill ops; shapes come from running the net")
        return 0
    try:
        with _to_stderr(progress):
            blobs = load_init_net(net, seed=seed, max_bytes=max_bytes, verbose=verbose)
    except _USER_ERRORS as err:
        raise error(str(err)) from None
    random = {out for op in net.ops if op.type in RANDOM_OPS for out in op.outputs}
    print(f"blobs ({len(blobs)}):")
    for name, array in blobs.items():
        note = " (random: one draw)" if name in random else ""
        print(f"  {name}: {_stats(array)}{note}")
    return 0


def _print_convertible(net, params, with_init_net):
    """``convertible: yes/no`` for ``to_keras`` and, for no, every unsupported op/feature."""
    from tfinit.caffe2._plan import grouped
    from tfinit.caffe2._spec import data_dependent, detection_ops
    from tfinit.caffe2._to_keras import problems

    used = detection_ops(net)
    if used:
        print("detection ops: " + ", ".join(
            f"{op_type} ({', '.join(f'#{k}' for k in indices)}: "
            f"{'converted' if converted else 'not converted'})"
            for op_type, indices, converted in used))
    dependent = data_dependent(net)
    if dependent:
        print(f"data-dependent rows: {', '.join(f'#{k} {t}' for k, t in dependent)} "
              "(TensorFlow backend; refused on JAX)")
    found = problems(net, params)
    if not found:
        note = "" if with_init_net else " (without --init-net, parameters are not checked)"
        print(f"convertible: yes{note}")
        return
    ops = len({p.index for p in found})
    print(f"convertible: no ({ops} of {len(net.ops)} ops unsupported)")
    for line, _ in grouped(found):
        print(f"  unsupported: {line}")


def parse_input_shape(values):
    """``--input-shape`` values: ``3,224,224`` (one data input) or ``NAME=D1,D2`` each
    (a net with several; ``NAME=`` is a per-example scalar). None when not given."""
    if not values:
        return None
    named = {}
    for value in values:
        name, sep, dims = value.rpartition("=") if "=" in value else ("", "", value)
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            raise ValueError(f"Argument `--input-shape` must be comma-separated ints such as "
                             f"3,224,224 (or NAME=2,26 per data input). Received: "
                             f"--input-shape={value}") from None
        if not sep:
            if len(values) > 1:
                raise ValueError("Argument `--input-shape` must be NAME=dims each when given "
                                 "more than once. Received: "
                                 + " ".join(f"--input-shape={v}" for v in values))
            return shape
        named[name] = shape
    return named


def _refuse_swapped(init_net, predict_net, output, err):
    """Raise ValueError saying the files look swapped when ``init_net`` failed to replay
    (``err``) and ``predict_net`` holds only fill ops; else nothing."""
    try:
        predict = read_with_progress(predict_net, 0)
    except _USER_ERRORS:
        return
    if holds_only_fill_ops(predict):
        raise ValueError(
            f"the files look swapped: INIT_NET {init_net} does not replay "
            f"({str(err).split(';')[0]}) and "
            f"PREDICT_NET {predict_net} holds only fill ops. `tfinit convert` takes the init "
            f"net first: tfinit convert {predict_net} {init_net} {output} ...") from None


def convert(init_net, predict_net, output, input_shape, error=ValueError, input_format=None,
            check=None, rtol=1e-4, progress=False, max_bytes=None, atol=None, time_major=True):
    """Write the Keras model of ``predict_net`` + ``init_net`` to ``output`` (.keras).

    ``check``: a forward ``.npz`` (``input/``, ``blob/`` keys): the model is also checked
    blob by blob (:func:`check_forward`); returns 1 when a blob diverges, else 0.
    ``progress``: progress bars on stderr (reading, replaying, converting, assigning);
    ``max_bytes``: the memory limit of ``load_init_net`` and ``to_keras``;
    ``time_major=False``: a recurrent net's batch-major form (``--batch-major``).
    """
    if not str(output).endswith(".keras"):
        raise error(f"Argument `output` must end in .keras. Received: output={output}")
    try:
        shape = parse_input_shape(input_shape)
    except ValueError as err:
        raise error(str(err)) from None
    from tfinit.caffe2._check import check_forward, reference_input_shape
    from tfinit.caffe2._to_keras import to_keras

    try:
        if shape is None and check is None:
            raise ValueError("--input-shape is required (or --check FILE.npz, whose "
                             "inputs give the shapes)")
        with _to_stderr(progress):  # read once: the blobs it fills are parameters
            try:
                params = load_init_net(init_net, max_bytes=max_bytes, verbose=int(progress))
            except ValueError as err:
                _refuse_swapped(init_net, predict_net, output, err)
                raise
        if shape is None:
            shape = reference_input_shape(predict_net, check, input_format, params=params,
                                          time_major=time_major)
        with _to_stderr(progress):
            model = to_keras(predict_net, params, shape, input_format=input_format,
                             max_bytes=max_bytes, verbose=int(progress), time_major=time_major)
        model.save(output)
        report = None if check is None else check_forward(
            predict_net, params, check, input_format=input_format, rtol=rtol, atol=atol,
            max_bytes=max_bytes, time_major=time_major)
    except _USER_ERRORS as err:
        raise error(str(err).splitlines()[0]) from None
    print(f"wrote {output}: {len(model.layers)} layers, {model.count_params()} parameters, "
          f"input {model.input_shape}, output {model.output_shape}")
    custom = sorted({type(layer).__name__ for layer in model.layers
                     if type(layer).__module__.startswith("tfinit.")})
    if custom:
        print(f"note: it uses tfinit's {', '.join(custom)} layer(s): `import tfinit.caffe2` "
              "before keras.saving.load_model")
    if report is None:
        return 0
    print(f"check against {check}:")
    print(report)
    return 0 if report.ok else 1
