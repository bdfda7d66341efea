"""``PairPolicy``: the Keras dtype policy of layers constructed in a mixed-precision scope.

It carries the scope's :class:`PairSpec` with the layer, so the rules apply whenever Keras
builds the layer (as Keras's own dtype policies do), and it is saved in ``.keras`` configs:

- pseudo_fp16: variables and compute in the 16-bit dtype (the variables get fp32 masters);
  normalization layers and ``keras.layers.Normalization`` (whose ``adapt`` writes float
  statistics) without an explicit dtype switch to ``mixed_<dtype>`` when they build (in both
  modes), so their weights, moving and adapted statistics stay fp32 on the layer's own
  variables, as Keras mixed_* keeps them and Caffe2 kept spatbn in fp32, and their saved
  configs load that way into a scope of either mode.
- reverse: fp32 variables, 16-bit compute, like ``mixed_<dtype>`` (its name; ``Model.compile``
  adds no second loss scaling because ``MasterWeightOptimizer`` is a ``LossScaleOptimizer``).
- Rebuilding a layer from such a config (``load_model``, ``clone_model``, ``from_config``)
  outside a scope raises: it would create 16-bit weights with no masters. Inside a scope the
  layer takes that scope's dtypes (Keras keeps a deserialized policy by its name); a file's
  fp32 masters load exactly into either 16-bit dtype.
"""

import weakref

import keras

from tfinit import _keras_internals as internals
from tfinit._precision import Mode, PairSpec, pair_spec
from tfinit.mixed_precision._common import scope_stack

NORMALIZATION_LAYERS = tuple(
    getattr(keras.layers, name)
    for name in ("BatchNormalization", "LayerNormalization", "GroupNormalization",
                 "RMSNormalization", "UnitNormalization",
                 # preprocessing layers whose non-trainable float state a method writes
                 # (Normalization.adapt's mean and variance): Keras mixed_* keeps it fp32
                 "Normalization")
    if hasattr(keras.layers, name)
)
#: how the chosen backend pairs a layer's weights, told once by ``_chosen_backend`` (this
#: module asks no backend): True on JAX and torch, where no variable creator pairs them as
#: they are created, so layers build them in float32 (their masters) and pair up once built
_building_masters = None


def layers_build_masters(value):
    """Whether layers holding a PairPolicy build fp32 weights that pair up afterwards
    (``value``: the chosen backend's answer, given once)."""
    global _building_masters
    _building_masters = bool(value)


def _layers_build_masters():
    if _building_masters is None:
        raise RuntimeError("tfinit.mixed_precision chose no backend yet (_chosen_backend).")
    return _building_masters


@keras.saving.register_keras_serializable(package="tfinit")
class PairPolicy(keras.dtype_policies.DTypePolicy):
    """The dtype policy of a layer whose trainable floating variables have fp32 masters.

    ``scope`` makes it Keras's global policy, so every layer constructed inside takes it and
    keeps it: the scope's rules apply whenever the layer builds, and it is saved in the
    layer's ``.keras`` config. Its name is Keras's for the same dtypes: pseudo_fp16 computes
    and stores in the 16-bit dtype (``"float16"``; the masters are fp32), reverse is
    ``"mixed_<dtype>"``. Normalization layers without an explicit dtype switch to
    ``mixed_<dtype>`` when they build (fp32 weights, as Caffe2 kept spatbn in fp32).
    Rebuilding a layer from its config outside a scope raises (it would get 16-bit weights
    without masters); inside a scope the layer takes that scope's dtypes.

    Args:
        compute_dtype: ``"float16"`` or ``"bfloat16"``.
        mode: ``"pseudo_fp16"`` or ``"reverse"``.

    Raises:
        ValueError: a bad ``compute_dtype`` or ``mode``; ``from_config`` outside a scope.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> policy = mp.PairPolicy("bfloat16", "reverse")
    >>> policy, policy.name, policy.compute_dtype, policy.variable_dtype
    (<PairPolicy "reverse" bfloat16>, 'mixed_bfloat16', 'bfloat16', 'float32')
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     dense = keras.layers.Dense(2)
    >>> dense.dtype_policy
    <PairPolicy "pseudo_fp16" float16>
    >>> mp.PairPolicy.from_config(policy.get_config())  # outside a scope
    Traceback (most recent call last):
    ...
    ValueError: This layer's config comes from a model built in tfinit.mixed_precision...
    """

    def __init__(self, compute_dtype="float16", mode="pseudo_fp16"):
        self._set_spec(pair_spec(mode, compute_dtype, "PairPolicy"))

    @classmethod
    def of(cls, spec):
        """The policy of ``spec``, a parsed :class:`PairSpec` (a scope's, with its master)."""
        policy = cls.__new__(cls)
        policy._set_spec(spec)
        return policy

    def _set_spec(self, spec):
        self.spec = spec
        # The name object leads back to this policy from a layer Keras rebuilds from a config
        # (Keras passes it the name only): ``layers_to_pair`` finds such layers.
        if _layers_build_masters():
            # No variable creator: the layer builds fp32 weights (its masters, as
            # mixed_<dtype>) and they pair up once built (keras_variables.pair_records).
            name = _PolicyName(f"mixed_{self.spec.compute_dtype}")
        else:
            name = _PolicyName(self.spec.keras_policy_name)
        name.policy = self
        super().__init__(name)
        if _layers_build_masters():
            _unpaired[id(name)] = name

    @property
    def variable_dtype(self):
        layer = internals.layer_being_built()
        # In both modes, so that a saved normalization layer says mixed_<dtype> in its config
        # and loads with fp32 weights into a scope of either mode.
        if isinstance(layer, NORMALIZATION_LAYERS) and layer.dtype_policy is self:
            layer.dtype_policy = keras.dtype_policies.DTypePolicy(
                f"mixed_{self.spec.compute_dtype}")
            return "float32"
        if _layers_build_masters():
            # No variable creator: the layer builds its weights in float32 (the exact fp32
            # initializer values, the masters) and they pair up afterwards.
            return "float32"
        return super().variable_dtype

    def get_config(self):
        return {"compute_dtype": self.spec.compute_dtype, "mode": self.spec.mode.value}

    @classmethod
    def from_config(cls, config):
        spec = current_spec()
        if spec is None:
            saved = PairSpec(Mode(config.get("mode", "pseudo_fp16")),
                             config.get("compute_dtype") or config.get("name", "float16"))
            raise ValueError(
                "This layer's config comes from a model built in tfinit.mixed_precision."
                f"scope({saved.mode.value!r}, compute_dtype={saved.compute_dtype!r}); "
                "rebuilding it outside a scope would create 16-bit weights without fp32 "
                "masters. Rebuild it (keras.models.load_model, clone_model, from_config) "
                f"inside `with tfinit.mixed_precision.scope({saved.mode.value!r}, "
                f"compute_dtype={saved.compute_dtype!r}):`."
            )
        # The scope's own policy: the layers (and models) rebuilt here are the scope's, as
        # those constructed in it (their models' ``compile`` wraps).
        return scope_stack.active().policy

    def __repr__(self):
        return f'<PairPolicy "{self.spec.mode.value}" {self.spec.compute_dtype}>'


@keras.saving.register_keras_serializable(package="tfinit")
class PseudoFP16Policy(PairPolicy):
    """tfinit 0.1's name for the pseudo_fp16 :class:`PairPolicy`, kept so its files load.

    A ``PairPolicy(name, "pseudo_fp16")`` saved under its old name and config
    (``{"name": <dtype>}``); ``from_config`` gives a :class:`PairPolicy` of the active
    scope. New code uses :class:`PairPolicy`.

    Args:
        name: the 16-bit compute dtype, ``"float16"`` or ``"bfloat16"``.

    Raises:
        ValueError: a bad ``name``; ``from_config`` outside a scope.

    Example:

    >>> from tfinit import mixed_precision as mp
    >>> old = mp.PseudoFP16Policy("bfloat16")
    >>> old, old.get_config()
    (<PairPolicy "pseudo_fp16" bfloat16>, {'name': 'bfloat16'})
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     mp.PseudoFP16Policy.from_config(old.get_config())   # the scope's dtypes
    <PairPolicy "pseudo_fp16" float16>
    """

    def __init__(self, name="float16"):
        super().__init__(name, "pseudo_fp16")

    def get_config(self):
        return {"name": self.spec.compute_dtype}

    @classmethod
    def from_config(cls, config):
        return PairPolicy.from_config({"compute_dtype": config.get("name", "float16"),
                                       "mode": "pseudo_fp16"})


class _PolicyName(str):
    """A PairPolicy's name on the keras.Variable backends (``"mixed_<dtype>"``), carrying
    the policy."""


#: on the keras.Variable backends: the names of PairPolicy objects whose layers may hold
#: unpaired weights
_unpaired = weakref.WeakValueDictionary()  # id -> _PolicyName


def policies_to_pair():
    """The PairPolicy objects whose layers may hold weights not paired yet (JAX, torch)."""
    return [name.policy for name in list(_unpaired.values())]


def done_pairing(policy):
    """Every layer holding ``policy`` has built and paired its weights."""
    _unpaired.pop(id(policy.name), None)


def layers_to_pair(policy):
    """The layers holding ``policy``, and those Keras rebuilt from a config with its name
    (they take ``policy`` back now, as on TensorFlow)."""
    layers = internals.layers_holding(policy)
    for layer in internals.layers_with_policy_named(policy.name):
        layer.dtype_policy = policy
        layers.append(layer)
    return layers


def use_normalization_policy(layer, policy):
    """A normalization layer holding ``policy`` keeps Keras ``mixed_<dtype>`` (fp32 weights,
    16-bit compute): True when ``layer`` is one (its policy is switched now)."""
    if isinstance(layer, NORMALIZATION_LAYERS):
        if layer.dtype_policy is policy:
            layer.dtype_policy = keras.dtype_policies.DTypePolicy(
                f"mixed_{policy.spec.compute_dtype}")
        return True
    return False


def current_spec():
    """The spec of the innermost active scope in this thread, or None."""
    state = scope_stack.active()
    return None if state is None else state.spec
