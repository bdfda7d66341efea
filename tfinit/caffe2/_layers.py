"""Keras layers for Caffe2 semantics that Keras's built-in layers lack.

Registered as ``"tfinit>Caffe2Pooling2D"``: a ``.keras`` file using it loads after
``import tfinit.caffe2``.
"""

import keras


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Pooling2D(keras.layers.Layer):
    """Caffe2's MaxPool/AveragePool with explicit pads on an NHWC tensor.

    Output size ``floor((H + pad_t + pad_b - k) / stride) + 1``; padded cells are
    ignored: max pads with -inf, average divides by the number of real cells
    (Caffe2's default ``count_include_pad=0``).
    """

    def __init__(self, mode, pool_size, strides, pads, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("max", "average"):
            raise ValueError(f"Caffe2Pooling2D: mode must be 'max' or 'average', got {mode!r}.")
        self.mode = mode
        self.pool_size = tuple(int(v) for v in pool_size)
        self.strides = tuple(int(v) for v in strides)
        self.pads = tuple(int(v) for v in pads)  # top, left, bottom, right (Caffe2's order)

    def _pad(self, x, value):
        t, left, b, r = self.pads
        return keras.ops.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=value)

    def call(self, x):
        if self.mode == "max":
            return keras.ops.max_pool(self._pad(x, float("-inf")), self.pool_size,
                                      self.strides, padding="valid")
        total = keras.ops.average_pool(self._pad(x, 0.0), self.pool_size, self.strides,
                                       padding="valid")
        ones = keras.ops.ones_like(x[..., :1])
        share = keras.ops.average_pool(self._pad(ones, 0.0), self.pool_size, self.strides,
                                       padding="valid")
        return total / share

    def compute_output_shape(self, input_shape):
        n, h, w, c = input_shape
        t, left, b, r = self.pads
        out_h = (h + t + b - self.pool_size[0]) // self.strides[0] + 1
        out_w = (w + left + r - self.pool_size[1]) // self.strides[1] + 1
        return (n, out_h, out_w, c)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "pool_size": self.pool_size,
                "strides": self.strides, "pads": self.pads}
