"""The models the GPU benchmarks train (Keras only: no TensorFlow, no JAX import).

``sizes`` is a dict with the keys each builder reads: ``mlp`` (``width``, ``depth``),
``resnet`` (``image``, ``channels``, ``blocks``), ``transformer`` (``seq``, ``d_model``,
``heads``). Every model ends in 10 outputs.
"""

import keras


def mlp(s):
    """``depth`` Dense layers of ``width`` units (ReLU), then 10 outputs: weight-heavy."""
    inputs = keras.Input((s["width"],))
    h = inputs
    for _ in range(s["depth"]):
        h = keras.layers.Dense(s["width"], activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def conv_bn(h, channels, strides=1, activation="relu"):
    h = keras.layers.Conv2D(channels, 3, strides=strides, padding="same", use_bias=False)(h)
    h = keras.layers.BatchNormalization()(h)
    return keras.layers.Activation(activation)(h) if activation else h


def residual_block(h, channels, strides):
    shortcut = h
    if strides != 1 or h.shape[-1] != channels:
        shortcut = keras.layers.Conv2D(channels, 1, strides=strides, use_bias=False)(h)
        shortcut = keras.layers.BatchNormalization()(shortcut)
    h = conv_bn(h, channels, strides)
    h = conv_bn(h, channels, activation=None)
    return keras.layers.Activation("relu")(keras.layers.Add()([h, shortcut]))


def resnet(s):
    """Stem, then 3 stages of ``blocks`` residual blocks (channels x1, x2, x4), then 10 logits."""
    inputs = keras.Input((s["image"], s["image"], 3))
    h = conv_bn(inputs, s["channels"])
    for stage in range(3):
        for block in range(s["blocks"]):
            strides = 2 if stage and not block else 1
            h = residual_block(h, s["channels"] * 2**stage, strides)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def transformer(s):
    """One pre-norm transformer block on (seq, d_model) inputs, mean-pooled to 10 logits."""
    d = s["d_model"]
    inputs = keras.Input((s["seq"], d))
    h = keras.layers.LayerNormalization()(inputs)
    h = keras.layers.MultiHeadAttention(s["heads"], d // s["heads"])(h, h)
    h = keras.layers.Add()([inputs, h])
    m = keras.layers.LayerNormalization()(h)
    m = keras.layers.Dense(4 * d, activation="gelu")(m)
    h = keras.layers.Add()([h, keras.layers.Dense(d)(m)])
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


MODELS = {"mlp": mlp, "transformer": transformer, "resnet": resnet}
