"""The LSTM that Caffe2's ``rnn_cell.LSTM`` builds, as a registered Keras layer.

Caffe2 runs it as a RecurrentNetwork op whose step net is ``FC(h_prev) + input_t`` into
``LSTMUnit`` (docs/caffe2-ops.md, "RecurrentNetwork"). The input projection (an FC with
``axis=2`` on the ``[T, N, D]`` sequence) stays a separate Dense layer, as in Caffe2.
"""

import keras


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2LSTM(keras.layers.Layer):
    """Time-major LSTM over precomputed input gates, with Caffe2's gate order and lengths.

    Call it on ``[gates_x, h0, c0]`` or ``[gates_x, h0, c0, seq_lengths]``: ``gates_x``
    ``[T, N, 4H]`` (the projected input), ``h0``/``c0`` ``[1, N, H]``, ``seq_lengths``
    ``[N]`` ints. Each step, with ``z = gates_x[t] + h @ recurrent_kernel + bias`` split
    into ``i, f, o, g`` (that order): ``c' = sigmoid(f + forget_bias) * c +
    sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')``. Where ``t >= seq_lengths[n]``
    the previous ``h, c`` are kept (``drop_states=False``) or zeroed (``True``).

    Returns ``[hidden_all [T, N, H], hidden_last [1, N, H], cell_all, cell_last]``.
    ``recurrent_kernel`` is ``[H, 4H]``: Caffe2's ``gates_t_w`` ``[4H, H]`` transposed
    (``load_into_keras`` transposes it; ``bias`` is ``gates_t_b``). Keras's ``LSTM``
    differs in gate order (``i, f, g, o``), in its batch-major input, in taking the input
    projection inside, and in having no ``forget_bias`` or per-sequence lengths.

    Args:
        units: ``H``, the hidden size: a positive int.
        forget_bias: added to the forget gate before its sigmoid (Caffe2's
            ``forget_bias``).
        drop_states: past a sequence's length, zero ``h, c`` instead of keeping them.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on ``[gates_x, h0, c0(, seq_lengths)]``: ``[hidden_all, hidden_last,
        cell_all, cell_last]``.

    Raises:
        ValueError: ``units`` is not positive, or (when built) ``gates_x`` does not have
            ``4 * units`` features.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2LSTM
    >>> gates = np.ones((2, 2, 4), "float32")  # [T=2, N=2, 4H]: i, f, o, g
    >>> h0 = c0 = np.zeros((1, 2, 1), "float32")  # [1, N, H]
    >>> lengths = np.array([2, 1], "int32")  # the second sequence ends after one step
    >>> lstm = Caffe2LSTM(units=1)
    >>> lstm.build([gates.shape, h0.shape, c0.shape, lengths.shape])
    >>> lstm.set_weights([np.zeros((1, 4)), np.zeros(4)])  # recurrent_kernel, bias
    >>> hidden_all, hidden_last, _, _ = lstm([gates, h0, c0, lengths])
    >>> keras.ops.convert_to_numpy(hidden_all)[..., 0].astype(float).round(4).tolist()
    [[0.3696, 0.3696], [0.5453, 0.3696]]
    >>> tuple(hidden_last.shape)
    (1, 2, 1)
    """

    def __init__(self, units, forget_bias=0.0, drop_states=False, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        if self.units <= 0:
            raise ValueError(f"Argument `units` must be a positive int. Received: units={units}")
        self.forget_bias, self.drop_states = float(forget_bias), bool(drop_states)

    def build(self, input_shape):
        gates = input_shape[0][-1]
        if gates is not None and gates != 4 * self.units:
            raise ValueError(f"Caffe2LSTM: the input gates have {gates} features; "
                             f"expected 4 * units = {4 * self.units}.")
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, 4 * self.units), initializer="glorot_uniform",
            name="recurrent_kernel")
        self.bias = self.add_weight(shape=(4 * self.units,), initializer="zeros", name="bias")

    def _step(self, state, inputs):
        h, c = state
        gates_x, t, lengths = inputs
        z = gates_x + keras.ops.matmul(h, self.recurrent_kernel) + self.bias
        i, f, o, g = keras.ops.split(z, 4, axis=-1)
        c_new = (keras.ops.sigmoid(f + self.forget_bias) * c
                 + keras.ops.sigmoid(i) * keras.ops.tanh(g))
        h_new = keras.ops.sigmoid(o) * keras.ops.tanh(c_new)
        if lengths is not None:
            valid = keras.ops.expand_dims(keras.ops.less(t, lengths), -1)
            kept_h = keras.ops.zeros_like(h) if self.drop_states else h
            kept_c = keras.ops.zeros_like(c) if self.drop_states else c
            h_new = keras.ops.where(valid, h_new, kept_h)
            c_new = keras.ops.where(valid, c_new, kept_c)
        return h_new, c_new

    def call(self, inputs):
        gates_x, h0, c0 = inputs[:3]
        lengths = keras.ops.cast(inputs[3], "int32") if len(inputs) > 3 else None
        steps = keras.ops.arange(keras.ops.shape(gates_x)[0], dtype="int32")

        def step(state, xs):
            h, c = self._step(state, (xs[0], xs[1], lengths))
            return (h, c), (h, c)

        (h, c), (hidden, cell) = keras.ops.scan(step, (h0[0], c0[0]), (gates_x, steps))
        return [hidden, h[None], cell, c[None]]

    def compute_output_shape(self, input_shape):
        steps, batch = input_shape[0][0], input_shape[0][1]
        every, last = (steps, batch, self.units), (1, batch, self.units)
        return [every, last, every, last]

    def get_config(self):
        return {**super().get_config(), "units": self.units, "forget_bias": self.forget_bias,
                "drop_states": self.drop_states}
