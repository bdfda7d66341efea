"""Caffe2 parameters into Keras layers: ``load_into_keras``.

Caffe2 names a layer's parameters ``<prefix>_w`` / ``<prefix>_b`` (SpatialBN:
``_s``, ``_b``, ``_rm``, ``_riv``) and stores them in its own layouts (docs/caffe2-ops.md,
"Weights in Keras"):

* FC ``[out, in]`` -> Dense kernel ``W.T``;
* conv OIHW (any spatial rank) -> Keras ``(*spatial, in, out)``: ``W.transpose(2, 3, 1, 0)``;
* an FC reading a conv output that Keras flattened channels-last gets its columns
  reordered from Caffe2's C,H,W flatten order to H,W,C;
* BatchNormalization gamma/beta/moving_mean/moving_variance = ``_s``/``_b``/``_rm``/``_riv``;
* tfinit's Caffe2LSTM recurrent_kernel = the step FC weight ``[4H, H]`` transposed;
* tfinit's Caffe2Broadcast weight = the Mul/Add parameter, in the model's layout;
* tfinit's Caffe2Parameter weight = a blob several ops read, as the init net holds it.

Values are assigned as the float32 arrays they are: a 16-bit variable with an fp32
master (tfinit's mixed-precision scopes) gets the master set exactly.
"""

import dataclasses
import math
import reprlib
import warnings
from collections.abc import Mapping

import keras
import numpy as np

from tfinit import _fans
from tfinit.caffe2._fill import load_init_net
from tfinit.caffe2._layers import Caffe2Broadcast, Caffe2Parameter
from tfinit.caffe2._lstm import Caffe2LSTM
from tfinit.caffe2._progress import Progress, check_verbose

_CONV = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)
_SLOTS = (  # (layer classes, ((Keras attribute, Caffe2 suffix), ...))
    ((keras.layers.Dense,), (("kernel", "_w"), ("bias", "_b"))),
    (_CONV, (("kernel", "_w"), ("bias", "_b"))),
    ((keras.layers.BatchNormalization,),
     (("gamma", "_s"), ("beta", "_b"), ("moving_mean", "_rm"), ("moving_variance", "_riv"))),
    ((Caffe2LSTM,), (("recurrent_kernel", "_w"), ("bias", "_b"))),
    ((Caffe2Broadcast, Caffe2Parameter), (("weight", ""),)),
)
_FC_WEIGHTS = {keras.layers.Dense: "kernel", Caffe2LSTM: "recurrent_kernel"}


@dataclasses.dataclass
class LoadReport:
    """What :func:`load_into_keras` did: every Caffe2 blob and Keras weight is accounted for.

    Each Caffe2 blob was assigned to a Keras weight (``assigned``) or taken by nothing
    (``unused``); each weight of the model was assigned or left as it was (``missing``).
    ``str(report)`` says it in a few lines; ``load_into_keras(..., strict=True)`` refuses a
    load that leaves anything unused or missing.

    Args:
        assigned: ``{blob: "layer.attribute"}``, in the order assigned.
        unused: the Caffe2 blobs no layer took.
        missing: the Keras weights left as they were (``"layer.attribute"``).
        reordered: ``{Dense layer name: (C, *spatial)}``: the FC layers whose columns were
            reordered from Caffe2's C,H,W flatten order to Keras's H,W,C.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import load_into_keras
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc1"),
    ...                           keras.layers.Dense(1, name="head")])
    >>> report = load_into_keras(model, {"fc1_w": np.ones((2, 3), "float32"),
    ...                                  "fc1_b": np.zeros(2, "float32"),
    ...                                  "pred_w": np.ones((1, 2), "float32")})
    >>> report.assigned
    {'fc1_w': 'fc1.kernel', 'fc1_b': 'fc1.bias'}
    >>> report.unused, report.missing
    (['pred_w'], ['head.kernel', 'head.bias'])
    >>> print(report)
    assigned 2 Caffe2 blobs
    unused Caffe2 blobs: pred_w
    Keras weights not assigned: head.kernel, head.bias
    """

    assigned: dict = dataclasses.field(default_factory=dict)  # blob -> "layer.attribute"
    unused: list = dataclasses.field(default_factory=list)  # Caffe2 blobs nothing took
    missing: list = dataclasses.field(default_factory=list)  # Keras weights left as they were
    reordered: dict = dataclasses.field(default_factory=dict)  # Dense layer -> (C, *spatial)

    def __str__(self):
        lines = [f"assigned {len(self.assigned)} Caffe2 blobs"]
        if self.reordered:
            lines.append("FC columns reordered from C,H,W: " + ", ".join(
                f"{k} {v}" for k, v in self.reordered.items()))
        if self.unused:
            lines.append("unused Caffe2 blobs: " + ", ".join(self.unused))
        if self.missing:
            lines.append("Keras weights not assigned: " + ", ".join(self.missing))
        return "\n".join(lines)


def _walk_layers(model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _walk_layers(layer)
        else:
            yield layer


def _slots(layer):
    for classes, slots in _SLOTS:
        if isinstance(layer, classes):
            return slots
    return None


# ---------------------------------------------------------------- layout conversion


def fc_kernel(w, flattened_from=None):
    """Dense kernel from a Caffe2 FC weight ``[out, in]``.

    ``flattened_from=(C, *spatial)``: the FC reads a Caffe2 ``(C, *spatial)`` tensor that
    Keras flattened channels-last, so Keras row ``(*spatial, c)`` is Caffe2 column
    ``(c, *spatial)``.
    """
    w = np.asarray(w)
    out = w.shape[0]
    if flattened_from is None:
        channels, spatial = w.shape[1], 1
    else:
        channels, spatial = flattened_from[0], math.prod(flattened_from[1:])
    source = w.reshape(out, channels, spatial)
    kernel = np.empty((spatial, channels, out), w.dtype)
    for o in range(0, out, 64):  # 64 x 64 tiles: the transpose stays in cache (4x a plain .T)
        for c in range(0, channels, 64):
            kernel[:, c:c + 64, o:o + 64] = source[o:o + 64, c:c + 64].transpose(2, 1, 0)
    return kernel.reshape(spatial * channels, out)


def conv_kernel(w):
    """Keras ``(*spatial, in, out)`` kernel from a Caffe2 ``(out, in, *spatial)`` weight."""
    return _fans.to_keras_layout(w)


# ---------------------------------------------------------------- FC-after-conv detection


def _history(tensor):
    from tfinit import _keras_internals as internals  # only for Keras functional graphs

    return internals.keras_tensor_origin(tensor)


def _layout(tensor):
    """'channels_last' / 'channels_first' of the layer that made ``tensor``, if known.

    Walks back through rank-preserving layers (activations, BN, dropout, merges);
    stops (None) at inputs, Permute, Reshape and anything that changes the rank.
    """
    for _ in range(1000):
        layer, inputs = _history(tensor)
        if layer is None:
            return None
        fmt = getattr(layer, "data_format", None)
        if fmt in ("channels_last", "channels_first"):
            return fmt
        if isinstance(layer, (keras.layers.Permute, keras.layers.Reshape)) or not inputs:
            return None
        if len(inputs[0].shape) != len(tensor.shape):
            return None
        tensor = inputs[0]
    return None


def _flattened_from(dense):
    """``(C, *spatial)`` when ``dense`` reads a channels-last conv output flattened by
    Keras; None when the flatten order already is Caffe2's (or nothing was flattened);
    ``...`` when the model has no graph to look at (subclassed models)."""
    try:
        tensor = dense.input  # its first call's input; a subclassed model's layers have none
    except (AttributeError, ValueError):
        return ...
    while True:  # skip 2-D pass-through layers (Dropout, Activation) after the flatten
        layer, inputs = _history(tensor)
        if layer is None or not inputs:
            return None
        if isinstance(layer, (keras.layers.Flatten, keras.layers.Reshape)):
            break
        if len(inputs) != 1 or tuple(inputs[0].shape) != tuple(tensor.shape):
            return None
        tensor = inputs[0]
    source = inputs[0]
    dims = tuple(source.shape[1:])
    if len(dims) < 2 or len(tensor.shape) != 2:
        return None
    layout = _layout(source)
    channels_first = getattr(layer, "data_format", None) == "channels_first"
    if layout == "channels_last" and not channels_first:
        return (dims[-1], *dims[:-1])
    if layout == "channels_first" and channels_first:
        return dims
    if layout == "channels_last" and channels_first:
        raise ValueError(
            f"load_into_keras: Dense layer '{dense.name}' reads a channels_last tensor "
            "flattened with Flatten(data_format='channels_first'); pass "
            f"flattened_conv={{'{dense.name}': (C, H, W)}} to say how Caffe2 flattened it."
        )
    return None


# ---------------------------------------------------------------- assignment


def _blob_names(layer, slots, name_map):
    entry = name_map.get(layer.name, layer.name)
    if isinstance(entry, Mapping):
        unknown = set(entry) - {attr for attr, _ in slots}
        if unknown:
            raise KeyError(
                f"load_into_keras: name_map['{layer.name}'] names {sorted(unknown)}, which "
                f"{type(layer).__name__} does not have; it has {[a for a, _ in slots]}."
            )
        return {attr: entry.get(attr) for attr, _ in slots}
    if not isinstance(entry, str):
        raise TypeError(
            f"load_into_keras: Argument `name_map` must map layer '{layer.name}' to a Caffe2 "
            f"prefix (str) or a dict of Keras attribute -> blob. Received: "
            f"name_map['{layer.name}']={entry!r}."
        )
    return {attr: entry + suffix for attr, suffix in slots}


def _convert(layer, attr, value, flattened_from, blob):
    received = f"Received: params['{blob}'] of shape {value.shape}."
    if isinstance(layer, (Caffe2Broadcast, Caffe2Parameter)):
        if value.size != math.prod(layer.shape):
            raise ValueError(
                f"load_into_keras: Argument `params` must give {type(layer).__name__} layer "
                f"'{layer.name}' a blob of {math.prod(layer.shape)} values (shape "
                f"{getattr(layer, 'caffe2_shape', layer.shape)}). {received}"
            )
        return layer.weight_from_caffe2(value)
    fc_weight = next((a for cls, a in _FC_WEIGHTS.items() if isinstance(layer, cls)), None)
    if attr != "kernel" and attr != fc_weight:
        return value
    if fc_weight is not None:
        if value.ndim != 2:
            raise ValueError(
                f"load_into_keras: Argument `params` must give {type(layer).__name__} layer "
                f"'{layer.name}' a 2-D Caffe2 FC weight [out, in]. {received}"
            )
        if flattened_from is not None and math.prod(flattened_from) != value.shape[1]:
            raise ValueError(
                f"load_into_keras: Dense layer '{layer.name}' reads a flattened {flattened_from} "
                f"tensor ({math.prod(flattened_from)} values) but its Caffe2 weight has shape "
                f"{value.shape}."
            )
        return fc_kernel(value, flattened_from)
    if value.ndim < 3:
        raise ValueError(
            f"load_into_keras: Argument `params` must give {type(layer).__name__} layer "
            f"'{layer.name}' a Caffe2 conv weight (out, in, *kernel). {received}"
        )
    return conv_kernel(value)


def _exact(value, variable):
    """The value to assign: float32 as Caffe2 holds it, never rounded to the variable's
    16-bit dtype here (a variable with an fp32 master sets the master from it exactly)."""
    dtype = keras.backend.standardize_dtype(variable.dtype)
    if value.dtype.kind == "f" and dtype != "float64":
        return np.asarray(value, dtype=np.float32)
    return value


def load_into_keras(model, params, name_map=None, flattened_conv=None, strict=False,
                    verbose=0):
    """Assign Caffe2 parameters to the layers of a built Keras model, by layer name.

    Caffe2 names a layer's parameters ``<prefix>_w`` / ``<prefix>_b`` (brew's convention;
    SpatialBN: ``_s``, ``_b``, ``_rm``, ``_riv``), so a layer named ``fc1`` takes
    ``fc1_w`` and ``fc1_b``. Each is converted from Caffe2's layout: an FC weight
    ``[out, in]`` becomes the Dense kernel ``W.T``; a conv weight ``(out, in, *kernel)``
    (OIHW) the Keras kernel ``(*kernel, in, out)``; SpatialBN's scale, bias, running mean
    and running variance become BatchNormalization's ``gamma``, ``beta``,
    ``moving_mean``, ``moving_variance``; tfinit's ``Caffe2LSTM`` and
    ``Caffe2Broadcast`` take their step FC weight and their Mul/Add parameter. An FC
    reading a conv output that Keras flattened channels-last gets its columns reordered
    from Caffe2's C,H,W flatten order to H,W,C; this is detected in Sequential and
    functional models, and said with ``flattened_conv`` for subclassed ones. Values are
    assigned as the float32 arrays they are (a 16-bit variable with an fp32 master gets
    the master set exactly).

    Args:
        model: a built ``keras.Model`` (layers nested in sub-models are walked).
        params: ``{blob: array}``, or an init net (path, bytes or
            :class:`NetDef`) replayed with :func:`load_init_net`.
        name_map: ``{layer name: Caffe2 prefix, or {Keras attribute: blob}}`` for layers
            whose Caffe2 names are not their own (``{"dense": "fc1"}``,
            ``{"dense": {"kernel": "w", "bias": None}}``).
        flattened_conv: ``{Dense layer name: (C, H, W)}``: the Caffe2 tensor the FC reads
            was flattened by Keras channels-last (``None``: no reordering). Needed for
            subclassed models only.
        strict: ``True`` refuses a load that leaves a blob unused or a Keras weight
            unassigned.
        verbose: ``0`` (silent), ``1`` (a ``keras.utils.Progbar`` over the layers that
            take Caffe2 parameters) or ``2`` (one line when done), as in Keras's ``fit``.

    Returns:
        A :class:`LoadReport`: what was assigned, and what was not.

    Raises:
        TypeError: ``model`` is not a ``keras.Model``, or a ``name_map`` entry is neither
            a prefix nor a dict.
        KeyError: ``name_map`` or ``flattened_conv`` names a layer the model does not
            have, or an attribute the layer does not have.
        ValueError: a layer that is not built, a blob whose shape does not fit its
            weight (the layer and both shapes named), or, with ``strict=True``, anything
            left unassigned.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import load_into_keras
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc1")])
    >>> w = np.array([[1, 2, 3], [4, 5, 6]], "float32")  # Caffe2's FC weight [out, in]
    >>> report = load_into_keras(model, {"fc1_w": w, "fc1_b": np.array([0.5, -0.5])})
    >>> report.assigned
    {'fc1_w': 'fc1.kernel', 'fc1_b': 'fc1.bias'}
    >>> keras.ops.convert_to_numpy(model.get_layer("fc1").kernel).tolist()  # W.T
    [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    >>> load_into_keras(model, {"fc1_w": w.T})
    Traceback (most recent call last):
    ...
    ValueError: load_into_keras: layer 'fc1' kernel: Caffe2 blob 'fc1_w' has shape (3, 2) ...
    """
    verbose = check_verbose(verbose, "load_into_keras")
    if not isinstance(model, keras.Model):
        raise TypeError(f"load_into_keras: Argument `model` must be a keras.Model. "
                        f"Received: model={reprlib.repr(model)} (of type "
                        f"{type(model).__name__}).")
    if not isinstance(params, Mapping):
        params = load_init_net(params, verbose=verbose)
    name_map = dict(name_map or {})
    flattened_conv = dict(flattened_conv or {})
    layers = list(_walk_layers(model))
    names = {layer.name for layer in layers}
    for option, mapping in (("name_map", name_map), ("flattened_conv", flattened_conv)):
        unknown = sorted(set(mapping) - names)
        if unknown:
            raise KeyError(
                f"load_into_keras: {option} names layer(s) {unknown} that the model does not "
                f"have; layers: {sorted(names)}."
            )
    has_conv = any(isinstance(layer, _CONV) for layer in layers)
    report = LoadReport()
    weighted = sum(_slots(layer) is not None for layer in layers)
    bar = Progress(verbose, f"Assigning Caffe2 parameters to the {weighted} layers of "
                   f"model {model.name!r} that take them", weighted, "layer")
    done = 0
    for layer in layers:
        slots = _slots(layer)
        if slots is None:
            report.missing.extend(f"{layer.name}.{w.path.rsplit('/', 1)[-1]}"
                                  for w in layer.weights)
            continue
        if not layer.built:
            raise ValueError(
                f"load_into_keras: layer '{layer.name}' is not built; build the model "
                "(call it on an input or give it an Input) before loading weights."
            )
        flattened_from = None
        if isinstance(layer, keras.layers.Dense):
            if layer.name in flattened_conv:
                flattened_from = flattened_conv[layer.name]
                flattened_from = None if flattened_from is None else tuple(flattened_from)
            else:
                flattened_from = _flattened_from(layer)
                if flattened_from is ...:
                    flattened_from = None
                    if has_conv:
                        warnings.warn(
                            f"load_into_keras: cannot see what Dense layer '{layer.name}' of "
                            "this subclassed model reads; if it is a flattened channels-last "
                            f"conv output pass flattened_conv={{'{layer.name}': (C, H, W)}}.",
                            stacklevel=2,
                        )
            if flattened_from is not None:
                report.reordered[layer.name] = flattened_from
        for attr, blob in _blob_names(layer, slots, name_map).items():
            variable = getattr(layer, attr, None)
            if variable is None:
                continue  # use_bias=False, center=False, ...
            if blob is None or blob not in params:
                report.missing.append(f"{layer.name}.{attr}")
                continue
            value = _convert(layer, attr, np.asarray(params[blob]), flattened_from, blob)
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"load_into_keras: layer '{layer.name}' {attr}: Caffe2 blob '{blob}' has "
                    f"shape {tuple(np.shape(params[blob]))} (in Keras layout "
                    f"{tuple(value.shape)}) but the Keras weight has shape "
                    f"{tuple(variable.shape)}."
                )
            variable.assign(_exact(value, variable))
            report.assigned[blob] = f"{layer.name}.{attr}"
        done += 1
        bar.update(done)
    report.unused = [blob for blob in params if blob not in report.assigned]
    if strict and (report.unused or report.missing):
        raise ValueError(f"load_into_keras (strict): not everything was assigned.\n{report}")
    return report
