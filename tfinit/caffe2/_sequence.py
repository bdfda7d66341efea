"""Batch-major sequences for a net with a RecurrentNetwork: ``to_keras(..., time_major=False)``.

Caffe2's recurrent nets are time-major: a sequence blob is ``[T, N, ...]`` and an LSTM's
initial and last states are ``[1, N, H]``. With ``time_major=False`` the model's interface
is Keras's (``keras.layers.LSTM``'s): sequences ``[N, T, ...]``, states ``[N, H]``,
``seq_lengths`` ``[N]``, so ``N`` is the Keras batch axis (free) and ``T`` a time axis.
Inside, the model computes Caffe2's time-major blobs as with ``time_major=True``;
:class:`Caffe2TimeMajor` layers move between the two forms at its inputs and outputs.

Which blobs are sequences or states is read from the net: a RecurrentNetwork's sequence
input (followed back through ops that keep the two leading axes), initial states,
``seq_lengths`` and outputs (offset ``1``: every step; ``-1``: the last), followed forward
through the same ops (Relu, Sigmoid, Tanh, Dropout; FC and Softmax with ``axis >= 2``).
"""

import re

import keras

from tfinit.caffe2._op_args import Unsupported, int_arg
from tfinit.caffe2._recurrent import io_blobs

SEQUENCE, STATE, LENGTHS = "sequence", "state", "lengths"
_ELEMENTWISE = ("Relu", "Sigmoid", "Tanh", "Dropout")
_TRAILING = ("FC", "Softmax")  # over the axes from `axis` on: keeps [T, N] when axis >= 2


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2TimeMajor(keras.layers.Layer):
    """Moves a blob between Keras's batch-major form and Caffe2's time-major one.

    A sequence ``[N, T, ...]`` becomes ``[T, N, ...]`` (``to="time_major"``) and back
    (``to="batch_major"``); with ``state=True`` an LSTM state ``[N, H]`` becomes Caffe2's
    ``[1, N, H]`` and back. ``to_keras(..., time_major=False)`` puts one at each sequence
    or state input and output.

    Args:
        to: ``"time_major"`` or ``"batch_major"``: the form of the result.
        state: whether the blob is a state (``[1, N, H]`` in Caffe2) rather than a sequence.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``).

    Returns:
        Called on a tensor: the tensor in the other form.

    Raises:
        ValueError: ``to`` is neither form.

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2 import Caffe2TimeMajor
    >>> tuple(Caffe2TimeMajor("time_major")(np.zeros((4, 5, 26), "float32")).shape)
    (5, 4, 26)
    >>> tuple(Caffe2TimeMajor("batch_major", state=True)(np.zeros((1, 4, 16))).shape)
    (4, 16)
    """

    def __init__(self, to="time_major", state=False, **kwargs):
        super().__init__(**kwargs)
        if to not in ("time_major", "batch_major"):
            raise ValueError(f"Argument `to` must be 'time_major' or 'batch_major'. "
                             f"Received: to={to!r}")
        self.to, self.state = to, bool(state)

    def call(self, x):
        if self.state:
            return x[None] if self.to == "time_major" else x[0]
        return keras.ops.transpose(x, (1, 0, *range(2, len(x.shape))))

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        if self.state:
            return (1, *shape) if self.to == "time_major" else shape[1:]
        return (shape[1], shape[0], *shape[2:])

    def get_config(self):
        return {**super().get_config(), "to": self.to, "state": self.state}


def _keeps_time_axes(op):
    """Whether ``op``'s first output keeps the ``[T, N]`` (or ``[1, N]``) leading axes of
    its first input."""
    if op.type in _ELEMENTWISE:
        return True
    if op.type in _TRAILING:
        try:
            return int_arg(op, "axis", 1) >= 2
        except (TypeError, ValueError):
            return False
    return False


def _recurrent_ops(net):
    for k, op in enumerate(net.ops):
        if op.type == "RecurrentNetwork":
            try:
                yield k, op, io_blobs(op)
            except ValueError as err:  # Unsupported, or arguments Caffe2 refuses
                what, end = ("unsupported ", ".") if isinstance(err, Unsupported) else ("", "")
                raise ValueError(f"to_keras: op #{k} RecurrentNetwork -> {list(op.outputs[:1])}:"
                                 f" {what}{err}{end}") from None


def input_roles(net, data):
    """``{data input: SEQUENCE | STATE | LENGTHS}`` for ``time_major=False``.

    Raises:
        ValueError: the net has no RecurrentNetwork, or a data input is none of the three.
    """
    found = list(_recurrent_ops(net))
    if not found:
        raise ValueError("Argument `time_major=False` takes a net with a RecurrentNetwork op "
                         "(its sequences batch-major); this net has none. Received: "
                         "time_major=False")
    roles = {}
    for k, _, (sequence, states, lengths, _) in found:
        roles.update({blob: STATE for blob in states})
        if lengths:
            roles[lengths] = LENGTHS
        blob = sequence
        for op in reversed(net.ops[:k]):  # back through the ops that keep [T, N]
            if blob in op.outputs[:1] and _keeps_time_axes(op) and op.inputs:
                blob = op.inputs[0]
            elif blob in op.outputs:
                break
        roles.setdefault(blob, SEQUENCE)
    unknown = [blob for blob in data if blob not in roles]
    if unknown:
        raise ValueError(
            f"to_keras(time_major=False): data input(s) {unknown} are neither a "
            f"RecurrentNetwork's sequence (read through Relu, Sigmoid, Tanh, Dropout, FC or "
            f"Softmax with axis >= 2), its initial states nor its seq_lengths, so their "
            f"batch-major form is unknown; convert with time_major=True (Caffe2's layout).")
    return {blob: roles[blob] for blob in data}


def blob_roles(net, inputs):
    """``{blob: SEQUENCE | STATE}`` for every blob the net holds last that is a sequence or a
    state, from the data inputs' ``inputs`` roles through the net's ops."""
    roles = {blob: role for blob, role in inputs.items() if role != LENGTHS}
    recurrent = {k: outs for k, _, (*_, outs) in _recurrent_ops(net)}
    for k, op in enumerate(net.ops):
        kept = roles.get(op.inputs[0]) if op.inputs and _keeps_time_axes(op) else None
        for blob in op.outputs:
            roles.pop(blob, None)
        if k in recurrent:
            roles.update({blob: SEQUENCE if offset == 1 else STATE
                          for blob, offset in recurrent[k].items() if offset in (1, -1)})
        elif kept:
            roles[op.outputs[0]] = kept
    return roles


def safe(blob):
    """The layer name ``Builder.name`` makes of ``blob`` when it is free."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", blob) or "layer"


def inbound(b, tensor, blob, role):
    """The data input ``tensor`` (a ``role`` one) in Caffe2's time-major form."""
    if role in (SEQUENCE, STATE):
        suffix = "_time_major" if role == SEQUENCE else "_state"
        return Caffe2TimeMajor("time_major", role == STATE, name=b.name(blob + suffix))(tensor)
    return tensor


def outbound(b, tensor, blob):
    """The output ``tensor`` in batch-major form (a sequence or a state; another blob as
    Caffe2 holds it), its layer named after ``blob``."""
    role = b.roles.get(blob)
    name = safe(blob)
    if name in b.reserved:  # kept free while the ops were converted
        b.reserved.discard(name)
    else:
        name = b.name(blob)
    if role in (SEQUENCE, STATE):
        return Caffe2TimeMajor("batch_major", role == STATE, name=name)(tensor)
    return keras.layers.Identity(name=name)(tensor)
