"""``MasterWeightOptimizer``, written once: the chosen backend's ``BackendOptimizer`` (its
pairs and its step) over ``_common.optimizer_core`` (what every backend shares), as Keras
writes ``Optimizer`` once with the backend's mixed in."""

import keras

from tfinit.mixed_precision._chosen_backend import BackendOptimizer
from tfinit.mixed_precision._common.optimizer_core import MasterWeightOptimizerBase


@keras.saving.register_keras_serializable(package="tfinit")
class MasterWeightOptimizer(BackendOptimizer, MasterWeightOptimizerBase):
    """Wrap a Keras 3 optimizer so it updates the fp32 masters of paired variables.

    Caffe2's MultiPrecisionSgd, for any Keras optimizer: each step casts the gradients of
    paired variables to fp32 and unscales them, the inner optimizer updates the fp32 masters
    (its slots are fp32), and the 16-bit copies are re-cast from the masters. The inner
    optimizer sees each master as a Keras variable with the paired variable's name, path and
    constraint, so everything it keys or routes by variable (weight-decay exclusions, EMA,
    gradient accumulation, ``MultiOptimizer`` paths, Muon's and Adafactor's state) works as
    under Keras's mixed policies. It is a ``keras.optimizers.LossScaleOptimizer`` (it does
    the loss scaling), so ``Model.compile`` never wraps it in a second one; ``compile`` on a
    model constructed in a scope wraps a plain optimizer in it. Variables without a master
    (fp32 variables, normalization layers) are updated by the inner optimizer directly; a
    16-bit variable without a master is an error. On TensorFlow it steps in place, in a
    replica context of tf.distribute; on JAX and torch its step is stateless (in ``fit``'s
    compiled step on JAX the masters travel as its optimizer state).

    Loss scaling, in the style of jmp's ``DynamicLossScale``: dynamic scaling keeps the
    largest scale under which the float16 gradients stay finite. It doubles the scale after
    2000 consecutive finite steps and, on a step with a non-finite gradient (on any replica),
    skips the step (masters, copies, slots and iterations unchanged) and halves the scale
    (Keras's ``LossScaleOptimizer`` constants, initial scale 2**15; no bound). ``"auto"``
    is decided once: in the constructor inside a scope, else at the first ``scale_loss`` or
    step, from the pairs the optimizer is built for, else the active scope, else the compute
    dtype of the model compiled with it (a Keras ``mixed_float16`` model: dynamic), else the
    paired variable a layer read last, else the scopes the process entered (float16 among
    them: dynamic; no 16-bit variable at all: no scaling).

    Args:
        optimizer: the Keras 3 optimizer that updates the masters (its slots are fp32).
        loss_scale: ``"auto"`` (the default: dynamic for float16, none for bfloat16, as
            Keras's mixed policies), ``"dynamic"``, a finite positive number (a fixed scale),
            or ``None`` (no scaling, no finiteness check: every step is applied).
        name: the optimizer's name.
        state_dtype: ``None`` / ``"float32"`` (the inner optimizer's state of a paired
            variable is fp32), or ``"bfloat16"``: its per-variable state (Adam's moments,
            momentum...) is stored in bfloat16, half the bytes; the update is still computed
            in fp32 on the exact master. EMA averages and gradient accumulators stay fp32. It
            changes the numerics: see the README's training-quality table. ``"int8"``:
            stored blockwise in 8 bits (uint8 codes on a dynamic map, a float32 scale per
            256), dequantized for each step and requantized after it (the guide: 8-bit
            optimizer state); an inner optimizer without moments, ``shard_over`` and
            several tf.distribute replicas are refused.
        shard_over: None, or (JAX only) the name of an axis of the active
            ``keras.distribution`` device mesh (``"batch"`` for ``DataParallel``): ZeRO-1,
            the fp32 masters (a split pair's remainders) and the inner optimizer's state are
            sharded over that axis on top of the variables' layouts (a variable with no
            dimension the axis size divides stays whole); the 16-bit copies keep Keras's
            layout and are gathered after each step. ``mode="pseudo_fp16"`` pairs only.
        seed: the seed of stochastic rounding (an int, default 0; in the config), for
            variables built in ``scope(..., master="stochastic")``: a step's draws are a
            function of it, the inner optimizer's ``iterations`` and the variable's index.

    Raises:
        TypeError: ``optimizer`` is not a Keras 3 optimizer.
        ValueError: ``optimizer`` is already a loss-scale optimizer, a bad ``loss_scale``,
            ``state_dtype`` or ``shard_over`` (an axis off JAX, or one the active
            distribution's mesh lacks), other keyword arguments; at build or a step, a
            16-bit variable without a master, a variable created outside the strategy that
            trains it (TensorFlow), a reverse pair with ``shard_over``.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False,
    ...                               kernel_initializer="ones")])
    >>> opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(1e-4))
    >>> opt.loss_scale, opt.dynamic                     # "auto" in a float16 scope
    ('auto', True)
    >>> model.compile(optimizer=opt, loss="mse")        # fit scales and unscales the loss
    >>> _ = model.fit(np.full((1, 2), 0.25), np.zeros((1, 1)), verbose=0)
    >>> master = mp.get_master_weights(model)[0]       # 1 - 1e-4 * (2 * 0.5) * 0.25
    >>> master.ravel(), model.get_weights()[0].ravel()  # the fp16 copy rounds it to 1
    (array([0.999975, 0.999975], dtype=float32), array([1., 1.], dtype=float16))
    >>> float(keras.ops.convert_to_numpy(opt.dynamic_scale))  # one finite step: kept
    32768.0

    In a custom loop: ``loss = opt.scale_loss(loss)`` inside the tape, then
    ``opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
    model.trainable_variables))``.
    """
