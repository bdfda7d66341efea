"""One Caffe2 blob, one Keras weight: parameters that several ops read.

Caffe2 trains a blob once, with the sum of the gradients of the ops that read it (DeepDetect's
Inception-BN reads each ``conv_*_b`` as the Conv's bias and as its Scale layer's Add
parameter). :func:`shared_blobs` finds the parameters read by more than one op (a Conv that
repeats another's kernel, bias and arguments reuses its layer instead); such a blob
becomes one :class:`Caffe2Parameter` whose output every reader adds or multiplies with a
``Caffe2Broadcast(..., weight_input=True)``. A shared blob is converted where it is a bias or a
broadcast operand (Conv and FC biases, the parameter of Add, Mul and Sum); read in another
slot (a kernel, a SpatialBN statistic) by more than one op it is refused, naming the ops.
"""

import collections

import numpy as np

from tfinit.caffe2._layers import Caffe2Broadcast, Caffe2Parameter
from tfinit.caffe2._op_args import Unsupported

_NOT_WEIGHTS = ("Split", "Reshape", "RecurrentNetwork")  # sizes and shapes: constants
_ELEMENTWISE = ("Add", "Mul", "Sum")
_BIAS_SLOTS = {"Conv": 2, "FC": 2}


def _shareable(op_type, slot):
    return op_type in _ELEMENTWISE or _BIAS_SLOTS.get(op_type) == slot


def conv_key(op):
    """What makes two Convs one layer: the same parameter blobs, arguments and engine."""
    args = tuple(sorted((name, repr(value.tolist() if isinstance(value, np.ndarray) else value))
                        for name, value in op.args.items()))
    return tuple(op.inputs[1:]), args, op.engine


def repeated_convs(net):
    """The indices of the Convs that repeat an earlier Conv's parameters and arguments (an
    FPN's RPN head, run on every level): they reuse its Keras ``Conv2D`` layer, so its
    kernel and bias are one weight each, as in Caffe2."""
    first, repeats = {}, set()
    for k, op in enumerate(net.ops):
        if op.type == "Conv" and len(op.inputs) > 1:
            key = conv_key(op)
            if key in first:
                repeats.add(k)
            first.setdefault(key, k)
    return repeats


def shared_blobs(net, params, param_slots, repeats=()):
    """The parameters of ``net`` that more than one op reads: ``{blob: [op indices]}``.

    ``param_slots(op, params, written)`` gives an op's parameter input indices;
    ``repeats``: ops that reuse an earlier op's layer (:func:`repeated_convs`), whose
    parameters are that layer's.

    Raises:
        ValueError: a shared blob read as something other than a bias or a broadcast
            operand, naming the blob, the ops and the slot.
    """
    readers, slots, written = collections.defaultdict(list), {}, set()
    for k, op in enumerate(net.ops):
        if op.type not in _NOT_WEIGHTS and k not in repeats:
            for j in sorted(param_slots(op, params, written)):
                blob = op.inputs[j]
                if blob in params and k not in readers[blob]:
                    readers[blob].append(k)
                    slots.setdefault(blob, []).append((k, op.type, j))
        written.update(op.outputs)
    shared = {blob: ks for blob, ks in readers.items() if len(ks) > 1}
    for blob in shared:
        bad = [(k, t, j) for k, t, j in slots[blob] if not _shareable(t, j)]
        if bad:
            k, op_type, j = bad[0]
            users = ", ".join(f"#{i} {t} (input {s})" for i, t, s in slots[blob])
            raise ValueError(
                f"to_keras: op #{k} {op_type}: unsupported parameter '{blob}' read by several "
                f"ops ({users}); one blob shared as a kernel or statistic is not converted "
                "(as a Conv/FC bias or an Add/Mul/Sum operand it is one shared Keras weight)."
            )
    return shared


def shared_operand(b, mode, blob, x, caffe2_shape, keras_shape, channels_first, base):
    """``x`` plus or times the shared weight of ``blob`` (made at its first reader)."""
    tensor = b.param_tensors.get(blob)
    if tensor is None:
        name = b.name(blob)
        tensor = Caffe2Parameter(np.shape(b.params[blob]), name=name)(x)
        b.routes[name] = {"weight": blob}
        b.param_tensors[blob] = tensor
    if int(np.prod(caffe2_shape)) != int(np.size(b.params[blob])):
        raise Unsupported(f"parameter '{blob}' of shape {tuple(np.shape(b.params[blob]))} "
                          f"read as shape {tuple(caffe2_shape)}")
    layer = Caffe2Broadcast(mode, keras_shape, caffe2_shape=caffe2_shape,
                            channels_first=channels_first, weight_input=True,
                            name=b.name(f"{base}_{blob}"))
    return layer([x, tensor])
