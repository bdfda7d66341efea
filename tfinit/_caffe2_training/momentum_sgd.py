"""Caffe2MomentumSGD: Caffe2's MomentumSGDUpdate operator as a Keras 3 optimizer.

Caffe2 (momentum_sgd_op.h, fp32): with ``lr`` and ``mu``
- nesterov:  ``m' = mu*m + lr*g;  param -= (1 + mu)*m' - mu*m``
- otherwise: ``m' = lr*g + mu*m;  param -= m'``
Keras's ``SGD(momentum=mu, nesterov=True)`` keeps ``-m`` and applies
``param += mu*m' - lr*g``: the same step in exact arithmetic, rounded differently in fp32
(a few ulps of ``|m|`` per step). ``MasterWeightOptimizer(Caffe2MomentumSGD(lr, 0.9))`` is
Caffe2's MultiPrecisionSgd bit for bit (nesterov defaults to True, as Caffe2's builder).
Sparse gradients are densified (Caffe2 rejected them). ``caffe2_weight_decay=wd`` is brew's
``optimizer.add_weight_decay``: ``g = g + wd * w`` (Caffe2's ``WeightedSum``) before the
update, on the parameters brew tags WEIGHT only; ``weight_decay=`` is Keras's decoupled decay.
"""

import math

import keras
from keras import ops

from tfinit import _backend
from tfinit import _keras_internals as internals
from tfinit.parameter_info import caffe2_tag


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2MomentumSGD(keras.optimizers.Optimizer):
    """Momentum SGD with Caffe2's exact update rule (``MomentumSGDUpdate``).

    Caffe2's ``momentum_sgd_op.h`` in fp32, with ``lr`` and ``mu``:

    - nesterov:  ``m' = mu*m + lr*g;  param -= (1 + mu)*m' - mu*m``
    - otherwise: ``m' = lr*g + mu*m;  param -= m'``

    Keras's ``SGD(momentum=mu, nesterov=True)`` takes the same step in exact arithmetic but
    rounds differently in fp32 (a few ulps of ``|m|`` per step). Wrapped,
    ``MasterWeightOptimizer(Caffe2MomentumSGD(lr, 0.9))`` is Caffe2's MultiPrecisionSgd bit
    for bit. A momentum slot is made for every variable even when ``momentum=0`` (Caffe2's
    ``<P>_momentum``); sparse gradients are densified (Caffe2 rejected them).

    Args:
        learning_rate: a float, a ``keras.optimizers.schedules.LearningRateSchedule`` or a
            callable, as for any Keras optimizer (Caffe2's ``lr`` blob, positive here: the
            step is subtracted).
        momentum: ``mu``, a float in ``[0, 1]``.
        nesterov: Caffe2's ``nesterov`` argument; ``True`` by default, as in Caffe2's SGD
            builders (``build_sgd``, ``build_multi_precision_sgd``).
        caffe2_weight_decay: brew's ``optimizer.add_weight_decay(model, wd)``: before the
            update, ``g = g + wd * w`` (Caffe2's ``WeightedSum``, in the variable's dtype) on
            the parameters brew tags WEIGHT (kernels, embeddings, BatchNormalization's
            ``gamma``), never on biases (a variable named ``bias``, ``beta`` or ``*_b``,
            brew's BIAS). ``0`` (default) adds nothing. Note that Caffe2's
            ``build_sgd(..., weight_decay=)`` does *not* decay: that keyword reaches the
            ``LearningRate`` op, which ignores it.
        name: the optimizer's name.
        **kwargs: the other arguments of ``keras.optimizers.Optimizer``. Its
            ``weight_decay`` keeps Keras's meaning: decoupled decay
            ``w -= lr * weight_decay * w`` on every variable not excluded with
            ``exclude_from_weight_decay``, biases included; not what brew does.

    Raises:
        ValueError: ``momentum`` is not a float in ``[0, 1]``, or ``caffe2_weight_decay`` is
            not a finite number >= 0.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> param = keras.Variable(np.array([1.0, 2.0], "float32"))
    >>> opt = mp.Caffe2MomentumSGD(learning_rate=0.5, momentum=0.5)
    >>> _ = opt.apply_gradients([(np.array([1.0, -1.0], "float32"), param)])
    >>> param.numpy()                                   # -= (1 + 0.5) * 0.5 * g
    array([0.25, 2.75], dtype=float32)
    >>> _ = opt.apply_gradients([(np.array([1.0, -1.0], "float32"), param)])
    >>> param.numpy()                                   # m' = 0.75 g: -= 1.125 g - 0.25 g
    array([-0.625,  3.625], dtype=float32)

    brew's weight decay reaches the kernel, not the bias:

    >>> layer = keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="ones")
    >>> layer.build((None, 1))
    >>> opt = mp.Caffe2MomentumSGD(learning_rate=1.0, caffe2_weight_decay=0.5)
    >>> _ = opt.apply_gradients([(np.zeros([1, 1], "float32"), layer.kernel),
    ...                          (np.zeros([1], "float32"), layer.bias)])
    >>> float(layer.kernel.numpy()[0, 0]), float(layer.bias.numpy()[0])   # 1 - 1 * 0.5 * 1
    (0.5, 1.0)
    """
    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=True,
                 caffe2_weight_decay=0.0, name="caffe2_momentum_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not isinstance(momentum, (int, float)) or not 0 <= momentum <= 1:
            raise ValueError("Caffe2MomentumSGD: Argument `momentum` must be a float in "
                             f"[0, 1]. Received: momentum={momentum!r}")
        if (not isinstance(caffe2_weight_decay, (int, float)) or isinstance(
                caffe2_weight_decay, bool) or not math.isfinite(caffe2_weight_decay)
                or caffe2_weight_decay < 0):
            raise ValueError("Caffe2MomentumSGD: Argument `caffe2_weight_decay` must be a "
                             "finite number >= 0 (brew's add_weight_decay). Received: "
                             f"caffe2_weight_decay={caffe2_weight_decay!r}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.caffe2_weight_decay = float(caffe2_weight_decay)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        # Caffe2 creates <P>_momentum (fp32 zeros) even when momentum is 0.
        self.momentums = [self.add_variable_from_reference(v, "momentum") for v in variables]
        self._caffe2_decayed = [caffe2_tag(v) == "WEIGHT" for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        gradient = _backend.dense_gradient(gradient)
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        mu = ops.cast(self.momentum, dtype)
        g = ops.cast(gradient, dtype)
        index = internals.optimizer_variable_index(self, variable)
        if self.caffe2_weight_decay and self._caffe2_decayed[index]:
            # brew's WeightedSum([grad, ONE, w, WD]): grad * 1 + w * wd
            g = ops.add(g, ops.multiply(variable, ops.cast(self.caffe2_weight_decay, dtype)))
        m_var = self.momentums[index]
        m = ops.convert_to_tensor(m_var)
        if self.nesterov:
            m_new = ops.add(ops.multiply(mu, m), ops.multiply(lr, g))
            step = ops.subtract(ops.multiply(ops.add(ops.cast(1.0, dtype), mu), m_new),
                                ops.multiply(mu, m))
        else:
            m_new = ops.add(ops.multiply(lr, g), ops.multiply(mu, m))
            step = m_new
        self.assign(m_var, m_new)
        self.assign_sub(variable, step)

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum, "nesterov": self.nesterov,
                       "caffe2_weight_decay": self.caffe2_weight_decay})
        return config
