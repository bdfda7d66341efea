"""``scope``, written once: the steps every backend takes, with the chosen backend's
``scope_steps`` supplying what differs (TensorFlow: a variable creator pairs variables as
they are created; JAX and torch: built layers' weights pair up)."""

import contextlib

from tfinit._precision import pair_spec
from tfinit.mixed_precision._chosen_backend import scope_steps
from tfinit.mixed_precision._common import scope_hooks, scope_stack
from tfinit.mixed_precision._common.pair_policy import PairPolicy
from tfinit.mixed_precision._optimizer import MasterWeightOptimizer

_WHO = "tfinit.mixed_precision.scope"


@contextlib.contextmanager
def scope(mode="pseudo_fp16", compute_dtype="float16", master="fp32"):
    """Pair the trainable floating variables of layers constructed inside with fp32 masters.

    Caffe2's ``PseudoFP16Initializer`` / ``ReversePseudoFP16Initializer``: each variable gets
    an fp32 master and a 16-bit copy, ``copy = cast(master)``; the master is filled first
    (Keras layers: the initializer runs in float32). Layers compute with the copy; the
    optimizer (``MasterWeightOptimizer``, which ``compile`` puts in), penalties, constraints
    and files use the master. Layers constructed inside pair up whenever they build, also
    after the ``with`` block (a subclassed model built by its first call or by ``fit``).
    Non-trainable, integer and float64 variables, and Keras variables requested in float32
    in pseudo_fp16 mode (normalization layers, layers given ``dtype="float32"``), stay as
    they are. On TensorFlow a variable creator pairs variables as they are created (enter
    the scope inside ``strategy.scope()`` to get distributed masters and copies); on JAX and
    torch a layer builds its weights in float32 and they pair up when the ``with`` block
    exits or anything asks for a pair, whichever comes first. Scopes nest; the previous
    Keras dtype policy is restored on exit.

    Args:
        mode: ``"pseudo_fp16"`` (code sees the 16-bit copy; the master is
            ``parameter_info(v).blob_copy["float32"]``) or ``"reverse"`` (code sees the fp32
            variable; the copy is ``blob_copy[compute_dtype]``).
        compute_dtype: ``"float16"`` (GPU) or ``"bfloat16"`` (TPU); strings, ``tf.DType`` and
            numpy dtypes are accepted.
        master: ``"fp32"`` (an fp32 master variable beside each copy) or ``"split"``
            (pseudo_fp16 with bfloat16 only, TensorFlow and JAX: the bfloat16 copy plus an
            int16 remainder, ``blob_copy["int16"]``, hold the master, exactly but for one
            float32 ulp in a rare tie (``tfinit._split_master``); no fp32 variable between
            steps, 4 bytes per parameter instead of 6). Everything else behaves as with
            ``"fp32"``. Or ``"stochastic"`` (pseudo_fp16 with bfloat16 only, TensorFlow and
            JAX): no master, the bfloat16 weight (2 bytes per parameter) takes the
            optimizer's fp32 update with stochastic rounding, seeded by
            ``MasterWeightOptimizer(seed=...)`` (``tfinit._stochastic_rounding``;
            ``get_master_weights`` gives the weights widened); ``blob_copy["int16"]`` is an
            empty placeholder.

    Returns:
        A context manager (yields ``None``).

    Raises:
        ValueError: a bad ``mode``, ``compute_dtype`` or ``master``; ``master="split"`` or
            ``"stochastic"`` with float16, in reverse mode or on torch; bfloat16 across
            MultiWorker workers.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> kernel = model.layers[0].kernel
    >>> master = mp.parameter_info(kernel).blob_copy["float32"]
    >>> kernel.dtype, keras.backend.standardize_dtype(master.dtype)
    ('float16', 'float32')
    >>> with mp.scope("reverse", compute_dtype="bfloat16"):
    ...     dense = keras.layers.Dense(2)
    >>> dense.build((None, 4))                          # builds later, still paired
    >>> dense.kernel.dtype, dense.compute_dtype
    ('float32', 'bfloat16')
    >>> with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
    ...     split = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> [keras.backend.standardize_dtype(d)
    ...  for d in mp.parameter_info(split.layers[0].kernel).blob_copy]
    ['int16']
    """
    spec = pair_spec(mode, compute_dtype, _WHO, master)
    scope_steps.check(spec)
    state = scope_stack.ScopeState(spec, scope_steps.strategy(), PairPolicy.of(spec))
    try:
        with scope_hooks.activated(state, scope_steps.creating):
            yield
    finally:
        scope_hooks.adopt_constructed_layers(
            state, MasterWeightOptimizer, scope_steps.after_build,
            creating=scope_steps.creating, adopt_model=scope_steps.adopt_model)
        scope_steps.after_exit()
