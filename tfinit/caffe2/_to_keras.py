"""A Keras model from a Caffe2 predict net: ``to_keras``.

By default the model takes and returns the Caffe2 net's layout (NCHW or NHWC images),
so the same array gives the same output as Caffe2; ``input_format`` picks the other.
The op semantics matched are in docs/caffe2-ops.md.
"""

from collections.abc import Mapping

import keras
import numpy as np

from tfinit.caffe2 import _ops, _plan, _sequence, _spec
from tfinit.caffe2._fill import holds_only_fill_ops, load_init_net
from tfinit.caffe2._keras import load_into_keras
from tfinit.caffe2._memory import Limit
from tfinit.caffe2._netdef import read_netdef
from tfinit.caffe2._progress import Progress, check_verbose
from tfinit.caffe2._recurrent import lengths_input
from tfinit.caffe2._sequence import LENGTHS, SEQUENCE, STATE
from tfinit.caffe2._shared import repeated_convs, shared_blobs

_SPECS = _spec.SPECS  # one OpSpec per converted op type
_FORMATS = {"channels_first": _ops.NCHW, "channels_last": _ops.NHWC}


def supported_ops():
    """The predict-net operator types ``to_keras`` converts, sorted.

    Each is converted with Caffe2's semantics (its defaults, pads, broadcasting and
    layouts; docs/caffe2-ops.md gives them op by op, with the arguments that are
    refused). A net with any other op is refused by :func:`to_keras` before anything is
    built, every unsupported op listed; ``tfinit inspect predict_net.pb`` says whether a
    net converts.

    Returns:
        A sorted list of Caffe2 operator type names.

    Example:

    >>> from tfinit.caffe2 import converted_ops
    >>> [op for op in ("Conv", "FC", "RecurrentNetwork", "SpatialBN") if op in converted_ops()]
    ['Conv', 'FC', 'RecurrentNetwork', 'SpatialBN']
    >>> "Im2Col" in converted_ops()
    False
    """
    return sorted(_SPECS)


def problems(net, params):
    """What of ``net`` to_keras does not convert (:class:`_plan.Problem` each); [] if none."""
    return _plan.problems(net, params, _SPECS)


def _param_slots(op, params=(), written=()):
    """Indices of ``op``'s inputs that are parameters (its spec's ``params``): the weight
    slots of FC, Conv, ...; for Add/Mul/Sum the inputs the init net fills (``params``)
    that no earlier op or data input wrote (``written``)."""
    spec = _SPECS.get(op.type)
    return set() if spec is None else set(spec.params(op, params, written))


def data_inputs(net, params=()):
    """The blobs the predict net reads before writing them, parameters excepted.

    ``params`` (the init net's blobs, or their names) tells a parameter input of Add/Mul
    (a Caffe Scale layer's scale and bias) from a second data input.
    """
    produced, inputs = set(), []
    for op in net.ops:
        slots = _param_slots(op, params, produced)
        for k, blob in enumerate(op.inputs):
            if blob not in produced and blob not in inputs and k not in slots:
                inputs.append(blob)
        produced.update(op.outputs)
    return inputs


def _op_error(k, op, err):
    """The ValueError for op #k: 'unsupported ...' for what is not converted."""
    what = "unsupported " if isinstance(err, _ops.Unsupported) else ""
    end = "." if what else ""
    return ValueError(f"to_keras: op #{k} {op.type} -> {list(op.outputs[:1])}: {what}{err}{end}")


def _int_inputs(net):
    """Data inputs read as integers (a RecurrentNetwork's seq_lengths, Gather's indices,
    ...: the ``int_inputs`` slots of the ops' specs)."""
    ints = set()
    for k, op in enumerate(net.ops):
        spec = _SPECS.get(op.type)
        ints.update(op.inputs[j] for j in (spec.int_inputs if spec else ())
                    if j < len(op.inputs))
        if op.type == "RecurrentNetwork":
            try:
                ints.add(lengths_input(op))
            except _ops.Unsupported as err:
                raise _op_error(k, op, err) from None
    return ints - {None}


def net_layout(net):
    """The Caffe2 layout of the net's 4-D blobs: the ``order`` of its layout ops."""
    orders = {_ops.op_order(op) for op in net.ops if op.type in _ops.LAYOUT_OPS}
    if len(orders) > 1:
        raise ValueError("to_keras: the net mixes NCHW and NHWC ops; one order is supported.")
    return orders.pop() if orders else _ops.NCHW


def _shape(value, what, free_first=False):
    try:
        shape = tuple(None if free_first and k == 0 and d is None else int(d)
                      for k, d in enumerate(value))
    except (TypeError, ValueError):
        raise TypeError(f"Argument `input_shape` must be a tuple of ints such as (3, 224, 224)"
                        f"{what}. Received: input_shape={value!r}") from None
    if any(d is not None and d <= 0 for d in shape):
        raise ValueError(f"Argument `input_shape` must hold positive dimensions{what}. "
                         f"Received: input_shape={shape}")
    return shape


def _input_shapes(input_shape, data, roles=None):
    """``{data input: per-example shape}`` from a tuple (one input) or a mapping.

    ``roles`` (``time_major=False``): a sequence's time axis may be None; a state's shape
    must be ``(H,)`` and seq_lengths' ``()``."""
    shapes = _given_shapes(input_shape, data, roles or {})
    for blob, role in (roles or {}).items():
        rank, what = {SEQUENCE: (None, "(T, D), T an int or None"), STATE: (1, "(H,)"),
                      LENGTHS: (0, "()")}[role]
        if (len(shapes[blob]) < 2) if rank is None else (len(shapes[blob]) != rank):
            raise ValueError(f"Argument `input_shape` for '{blob}' (a RecurrentNetwork's "
                             f"{role}) must be {what} with time_major=False, batch-major as "
                             f"keras.layers.LSTM takes it. Received: {shapes[blob]}")
    return shapes


def _given_shapes(input_shape, data, roles):
    if isinstance(input_shape, Mapping):
        unknown = sorted(set(input_shape) - set(data))
        missing = [blob for blob in data if blob not in input_shape]
        if unknown or missing:
            raise ValueError(f"Argument `input_shape` must map each data input of the net "
                             f"{data} to its per-example shape. Received keys "
                             f"{sorted(input_shape)} (missing {missing}, unknown {unknown})")
        return {blob: _shape(input_shape[blob], f" for '{blob}'", roles.get(blob) == SEQUENCE)
                for blob in data}
    if len(data) != 1:
        raise ValueError(f"Argument `input_shape` must be a mapping {{blob: shape}}: the net "
                         f"reads {len(data)} data inputs {data}. Received: "
                         f"input_shape={input_shape!r}")
    return {data[0]: _shape(input_shape, "", roles.get(data[0]) == SEQUENCE)}


def _interface(b, tensor, base, inbound):
    """Permute between the model's 4-D interface layout and the internal NHWC; with
    ``time_major=False``, move sequences and states to and from Caffe2's time-major form."""
    if b.input_roles is not None:  # every output gets a layer named after its blob
        role = b.input_roles[base] if inbound else b.roles.get(base)
        if inbound and role in (SEQUENCE, STATE):
            return _sequence.inbound(b, tensor, base, role)
        if not inbound:
            tensor = tensor if role else _image_interface(b, tensor, base, inbound)
            return _sequence.outbound(b, tensor, base)
    return _image_interface(b, tensor, base, inbound)


def _image_interface(b, tensor, base, inbound):
    if len(tensor.shape) != 4 or b.io_layout == _ops.NHWC:
        return tensor
    perm = _ops.TO_NHWC if inbound else _ops.TO_NCHW
    suffix = "_nhwc" if inbound else "_nchw"
    return keras.layers.Permute(perm, name=b.name(base + suffix))(tensor)


def _run_op(b, k, op):
    try:
        if not op.outputs or not op.inputs:
            raise ValueError("an op needs an input and an output blob")
        spec = _SPECS[op.type]
        spec.check_arity(op)
        params = _param_slots(op, b.params, b.blobs)
        activations = [blob for j, blob in enumerate(op.inputs) if j not in params]
        missing = [blob for blob in activations if blob not in b.blobs]
        if missing and op.type != "RecurrentNetwork":
            raise ValueError(f"reads {missing}, which no earlier op wrote")
        xs = [b.blobs.get(blob) for blob in activations]
        results = spec.build(b, op, *xs)
        if not isinstance(results, tuple):
            results = (results,)
        # strict=False: a handler returns the outputs it converts, first; the op may name
        # more (Dropout's mask, which the handler marks opaque: never a tensor).
        for blob, tensor in zip(op.outputs, results, strict=False):
            if tensor is not None:
                b.check_size(op, f"its output '{blob}'", tuple(tensor.shape),
                             keras.backend.standardize_dtype(tensor.dtype))
                b.blobs[blob] = tensor
                b.writer[blob] = k
                b.opaque.pop(blob, None)
    except (ValueError, TypeError, OverflowError) as err:  # Unsupported, bad argument types
        raise _op_error(k, op, err) from None


def to_keras(predict_net, init_net, input_shape, outputs=None, input_format=None, *,
             max_bytes=None, verbose=0, time_major=True):
    """A Keras model computing a Caffe2 predict net, with the init net's parameters.

    Args:
        predict_net: path, bytes or :class:`NetDef`.
        init_net: path, bytes, NetDef, or a ``{blob: array}`` mapping.
        input_shape: the per-example shape of the net's data input, without Caffe2's
            first axis: ``(C, H, W)`` for NCHW images, ``(H, W, C)`` with
            ``input_format="channels_last"``. A net reading several data inputs takes
            ``{blob: shape}`` (e.g. a time-major LSTM: ``{"input_blob": (N, D),
            "seq_lengths": (), ...}``; Caffe2's first axis is then Keras's batch axis;
            with ``time_major=False``: ``{"input_blob": (T, D), "hidden_init": (H,),
            "cell_init": (H,), "seq_lengths": ()}``, ``T`` an int or None).
        outputs: blobs to return (default: the net's external outputs that hold
            tensors), e.g. intermediate blobs for checking a conversion; a blob written
            in place gives its last value, as Caffe2's workspace holds it.
        input_format: ``"channels_first"`` or ``"channels_last"``: the layout of the
            model's 4-D inputs and outputs (default: the net's own ``order``).
        max_bytes: the most bytes one example of any blob may take (and, for an init net
            that is replayed, its blobs together); ``None``: the memory available
            (``MemAvailable`` on Linux, within a cgroup's limit). A model file is untrusted
            input: a net asking for more (huge pads, a broadcast that explodes) is refused
            while the layers are planned, before anything runs. Pass a larger int to allow
            more.
        verbose: ``0`` (silent), ``1`` (a ``keras.utils.Progbar`` while the init net is
            read and replayed, the ops are converted and the weights assigned) or ``2``
            (one line each when done), as in Keras's ``fit``.
        time_major: ``True`` (default): a net with a RecurrentNetwork keeps Caffe2's
            time-major blobs (``[T, N, D]``, ``T`` the Keras batch axis, ``N`` fixed by
            ``input_shape``), so Caffe2's arrays feed it as they are. ``False``: Keras's
            batch-major form, as ``keras.layers.LSTM`` takes it, for ``fit``: sequences
            ``[N, T, ...]``, initial and last states ``[N, H]``, ``seq_lengths`` ``[N]``
            (``N`` free); other blobs come out as Caffe2 holds them, and every output
            is a layer named after its blob (``/`` as ``_``). Only for a net with a
            RecurrentNetwork (docs/caffe2-import.md, "Training a converted recurrent net").

    Returns:
        A functional ``keras.Model`` with named inputs (the blob names); trainable,
        savable as ``.keras`` (tfinit's layers are registered on ``import tfinit.caffe2``).

    Raises:
        ValueError: unsupported ops (all listed), bad arguments, an ``input_shape`` that
            does not fit the first op's weight, unknown output blobs, a blob over
            ``max_bytes`` (named with its op, its shape and the bytes it needs);
            ``time_major=False`` for a net without a RecurrentNetwork or with a data input
            that is not its sequence, initial state or seq_lengths.
        TypeError: an ``input_shape`` that is not a tuple of ints; a ``time_major`` that
            is not a bool.

    Example:

    >>> import numpy as np
    >>> from importlib import resources
    >>> from tfinit.caffe2 import to_keras
    >>> examples = resources.files("tfinit.caffe2") / "examples"  # a net Caffe2 ran
    >>> model = to_keras(examples / "mlp_predict_net.pb", examples / "mlp_init_net.pb",
    ...                  input_shape=(10,))
    >>> [layer.name for layer in model.layers]
    ['data', 'fc1', 'relu1', 'fc2', 'relu2', 'fc3', 'prob']
    >>> reference = np.load(examples / "mlp_forward.npz")  # Caffe2's input and output
    >>> probs = model(reference["input/data"])
    >>> bool(np.allclose(probs, reference["blob/prob"], atol=1e-6))  # on a CPU (GPU: TF32)
    True

    For an image net, ``input_shape=(3, 224, 224)`` takes NCHW batches as Caffe2 does;
    ``input_format="channels_last"`` with ``(224, 224, 3)`` takes NHWC ones.
    """
    verbose = check_verbose(verbose, "to_keras")
    limit = Limit(max_bytes, "to_keras")
    net = read_netdef(predict_net)
    try:
        params = init_net if isinstance(init_net, Mapping) else load_init_net(
            init_net, max_bytes=max_bytes, verbose=verbose)
    except ValueError as err:
        if holds_only_fill_ops(net):
            raise ValueError(
                "to_keras: the two nets look swapped: argument `predict_net` holds only fill "
                f"ops (an init net) and `init_net` does not replay ({str(err).split(';')[0]}). "
                "to_keras takes "
                "the predict net first: to_keras(predict_net, init_net, input_shape).") from None
        raise
    b = build(net, params, input_shape, input_format, limit=limit, verbose=verbose,
              time_major=time_major, reserve=net.external_output if outputs is None else outputs)
    return model_of(b, net, outputs, verbose=verbose)


def build(net, params, input_shape, input_format=None, limit=None, verbose=0, *,
          time_major=True, reserve=()):
    """Convert every op of ``net``: a :class:`_ops.Builder` holding the Keras tensor of
    each blob (``b.blobs``), the op that last wrote it (``b.writer``) and the inputs.
    ``limit``: a :class:`_memory.Limit` on one example of a blob (default: the memory
    available); ``time_major=False``: the batch-major interface, the layer names of the
    blobs ``reserve`` (the outputs to be) kept for the output layers."""
    if input_format not in (None, *_FORMATS):
        raise ValueError(f"Argument `input_format` must be 'channels_first', 'channels_last' "
                         f"or None. Received: input_format={input_format!r}")
    if not isinstance(time_major, (bool, np.bool_)):
        raise TypeError(f"Argument `time_major` must be a bool. Received: "
                        f"time_major={time_major!r}")
    refusal = _plan.refusal(problems(net, params), _SPECS)
    if refusal:
        raise ValueError(refusal)
    try:
        layout = net_layout(net)
    except _ops.Unsupported as err:
        raise ValueError(f"to_keras: unsupported {err}.") from None
    _check_backend(net)
    ints = _int_inputs(net)
    data = data_inputs(net, params)
    if not data:
        raise ValueError("to_keras: the predict net reads no data input.")
    roles = None if time_major else _sequence.input_roles(net, data)
    shapes = _input_shapes(input_shape, data, roles)
    b = _ops.Builder(params, layout, limit)
    b.input_roles, b.roles, b.reserved = roles, {}, set()
    b.shared = shared_blobs(net, params, _param_slots,  # one weight for each (_shared)
                            repeats=repeated_convs(net))
    b.io_layout = _FORMATS[input_format] if input_format else layout
    b.data_inputs = set(data)
    b.bbox_rois = _spec.bbox_rois(net)  # Collect's rois grouped by image (_detection_ops)
    b.nms_images = _spec.nms_images(net)  # BoxWithNMSLimit without batch_splits
    b.input_shapes = shapes
    b.inputs = []
    for blob in data:
        inp = keras.Input(shape=shapes[blob], name=b.name(blob),
                          dtype="int32" if blob in ints else "float32")
        b.inputs.append((blob, inp))
        b.blobs[blob] = _interface(b, inp, blob, inbound=True)
    if roles is not None:
        b.roles = _sequence.blob_roles(net, roles)
        free = {_sequence.safe(blob) for blob in reserve} - b.used_names
        b.used_names.update(free)
        b.reserved = free
    bar = Progress(verbose, f"Converting the {len(net.ops)} ops of predict net "
                   f"{net.name or '(unnamed)'!r}", len(net.ops), "op")
    for k, op in enumerate(net.ops):
        _run_op(b, k, op)
        bar.update(k + 1)
    return b


def _check_backend(net):
    """JAX compiles with static shapes: a net whose outputs' row counts depend on input
    values (proposals, detections), or with a detection op, converts on TensorFlow only
    (docs/caffe2-ops.md)."""
    dependent = _spec.data_dependent(net)
    if dependent and keras.backend.backend() != "tensorflow":
        ops = ", ".join(f"#{k} {op_type}" for k, op_type in dependent)
        raise ValueError(f"to_keras: the net has ops whose output rows depend on the input "
                         f"values ({ops}); the {keras.backend.backend()} backend needs static "
                         f"shapes, so such nets convert on the TensorFlow backend only "
                         f"(KERAS_BACKEND=tensorflow).")


def _model(b, name, results):
    inputs = [inp for _, inp in b.inputs]
    return keras.Model(inputs if len(inputs) > 1 else inputs[0],
                       results if len(results) > 1 else results[0], name=name)


def model_of(b, net, outputs=None, verbose=0):
    """The Keras model returning ``outputs`` (blob names) of a :func:`build`, loaded."""
    if outputs is None:
        outputs = [blob for blob in net.external_output if blob not in b.opaque]
    outputs = list(outputs)
    if not outputs:
        raise ValueError("to_keras: the predict net names no external_output; pass outputs=.")
    opaque = [f"{blob} ({b.opaque[blob]})" for blob in outputs if blob in b.opaque]
    missing = [blob for blob in outputs if blob not in b.blobs and blob not in b.opaque]
    if opaque or missing:
        raise ValueError(f"to_keras: output blob(s) {missing + opaque} are not tensors the "
                         f"net writes; blobs: {sorted(b.blobs)}.")
    results = [_interface(b, b.blobs[blob], blob, inbound=False) for blob in outputs]
    name = b.name(net.name or "caffe2_net")
    model = _model(b, name, results)
    names = model.output_names if len(results) > 1 else []
    if any(names.count(given) > 1 for given in names):  # a layer with several outputs
        results = [keras.layers.Identity(name=b.name(blob))(tensor)
                   if names.count(given) > 1 else tensor
                   for blob, tensor, given in zip(outputs, results, names, strict=True)]
        model = _model(b, name, results)
    present = {layer.name for layer in model.layers}
    load_into_keras(model, b.params,
                    name_map={k: v for k, v in b.routes.items() if k in present},
                    flattened_conv={k: v for k, v in b.flattened.items() if k in present},
                    strict=False, verbose=verbose)
    return model
