"""The master invariant (docs/mixed-precision.md#the-master-invariant), written once.

After any call on a model built in a ``tfinit.mixed_precision`` scope:

(a) a call that does not train leaves every master bit-unchanged;
(b) a non-trainable variable's master changes only through ``set_weights``,
    ``set_master_weights`` or a load;
(c) the masters equal the oracle's after the same sequence of calls: Keras mixed
    (``mixed_<dtype>``, same fp32 weights, same calls) bit for bit where the arithmetic is the
    same (``comparison``), and for ``master="split"`` the fp32-master run, up to the documented
    ties (a master exactly halfway above an even bfloat16 copy is stored 1 ulp toward it).
    ``master="stochastic"`` has no master (``get_master_weights`` widens the bfloat16
    weights), so its oracle is a twin: the same configuration given the same calls holds the
    same bits (the draws are a function of seed, step and variable only), and every "master"
    is its bfloat16 weight widened (nothing else is stored). The exactness of one step
    against an independent numpy oracle with the same draws is test_stochastic_rounding.py's.
    Split masters with 8-bit optimizer state (``state_dtype="int8"``, the configuration
    ``"split+int8"``) compare bit for bit with a twin too: their masters are exact, but the
    dequantized moments are not the fp32 run's (test_int8_state.py bounds them and checks the
    first step's masters against fp32 state's).

``check`` asserts the three for one call; ``comparison`` says how (c) compares in a
configuration. The state machine (test_master_invariant.py) calls them after every step.
"""

import dataclasses

import keras
import numpy as np

import _parity as P
from tfinit import mixed_precision as mp

#: the calls that may train (change a trainable master)
TRAINS = frozenset({"fit", "train_on_batch"})
#: the calls that may set any master, trainable or not
SETS = frozenset({"set_weights", "set_master_weights", "load"})


@dataclasses.dataclass(frozen=True)
class Masters:
    """One model's masters (``get_master_weights``, in ``model.weights`` order), with each
    variable's path, whether it is paired (has a master) and whether it is trainable."""

    arrays: tuple
    labels: tuple
    paired: tuple
    trainable: tuple


def _paired(variable):
    try:
        mp.parameter_info(variable)
    except ValueError:
        return False
    return True


def masters_of(model):
    """The ``Masters`` of a tfinit model (or, for the Keras-mixed oracle, its fp32 weights)."""
    weights = model.weights
    return Masters(tuple(np.array(a) for a in mp.get_master_weights(model)),
                   tuple(v.path for v in weights), tuple(_paired(v) for v in weights),
                   tuple(bool(v.trainable) for v in weights))


def weights_of(model):
    """The ``Masters`` of the Keras-mixed oracle: its own (fp32) weights, nothing paired."""
    weights = model.weights
    return Masters(tuple(np.array(a) for a in model.get_weights()),
                   tuple(v.path for v in weights), (False,) * len(weights),
                   tuple(bool(v.trainable) for v in weights))


#: (c)'s comparisons: bit for bit; split against fp32 masters, equal up to the ties; or each
#: update within ``CLOSE_ULPS`` compute-dtype ulps of the oracle's (``P.assert_close``), where
#: the documented arithmetic differs (``comparison``)
BITWISE, UP_TO_TIES, CLOSE = "bitwise", "up to ties", "close"
#: (c) for master="stochastic": bit for bit against a stochastic twin, masters bfloat16-exact
STOCHASTIC_TWIN = "stochastic twin"
#: the bound of a ``CLOSE`` comparison, per call: test_keras_parity.py measured at most 1
#: compute-dtype ulp of the largest update after three steps from the same state; here the
#: optimizer's slots may have drifted by earlier calls' differences, so P.assert_close's 8
CLOSE_ULPS = 8


def comparison(master, mode, *, lora=False, embedding=False):
    """How (c) compares in a configuration, on the Keras backend in use.

    ``master="split"``: ``UP_TO_TIES`` against the fp32-master run. Otherwise ``BITWISE``
    against Keras mixed, except where the documented arithmetic differs (``CLOSE``), in
    pseudo_fp16: LoRA weights on TensorFlow and torch (the low-rank product formed from their
    fp32 values, test_keras_parity's ``test_lora_weights_stay_float32_and_train_like_keras``)
    and an Embedding's gradient on JAX and torch (the copy is a 16-bit leaf: each read's
    gradient is 16-bit, ``_EMBEDDING_ON_TORCH``; docs/mixed-precision.md, "The token
    embedding on JAX").
    """
    if master == "split":
        return UP_TO_TIES
    if master == "stochastic":
        return STOCHASTIC_TWIN
    if master.endswith("+int8"):  # 8-bit state: a twin of the same configuration
        return BITWISE
    backend = keras.backend.backend()
    if mode == "pseudo_fp16" and ((lora and backend != "jax")
                                  or (embedding and backend in ("jax", "torch"))):
        return CLOSE
    return BITWISE


def ties_apart(want, got):
    """The number of ties where split masters ``got`` differ from fp32 masters ``want``; any
    other difference (or a tie not stored 1 ulp toward its copy) is an AssertionError."""
    ties, bad = 0, []
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if w.dtype != np.float32:
            if w.tobytes() != g.tobytes():
                bad.append(f"#{i}: {np.count_nonzero(w != g)} elements differ")
            continue
        w, g = w.view(np.uint32), g.view(np.uint32)
        tie = ((w & 0xFFFF) == 0x8000) & (((w >> 16) & 1) == 0)
        apart = w != g
        if np.any(apart & ~tie) or np.any(g[tie & apart] != w[tie & apart] - 1):
            bad.append(f"#{i}: {np.count_nonzero(apart & ~tie)} elements differ off the ties, "
                       f"max {P.max_ulps(w.view(np.float32), g.view(np.float32))} ulps")
        ties += int(np.count_nonzero(apart & tie))
    assert not bad, "split masters differ from the fp32-master run:\n  " + "\n  ".join(bad)
    return ties


def check(call, before, after, oracle, how, dtype):
    """Assert the invariant for ``call`` (a name; ``TRAINS``, ``SETS`` or neither) that took a
    tfinit model's ``Masters`` from ``before`` to ``after``; ``oracle``: the oracle's after the
    same call; ``how``: ``comparison``'s answer. Returns the number of ties met (split)."""
    if call not in SETS:
        was = {label: (b, paired, trainable) for label, b, paired, trainable in zip(
            before.labels, before.arrays, before.paired, before.trainable, strict=True)}
        moved = [label for label, a in zip(after.labels, after.arrays, strict=True)
                 if label in was and was[label][1] and was[label][0].tobytes() != a.tobytes()
                 and (call not in TRAINS or not was[label][2])]
        rule = "(b) a non-trainable variable's master" if call in TRAINS else (
            "(a) a call that does not train")
        assert not moved, f"{rule}: {call} changed the masters of {moved}"
    what = f"(c) after {call}: masters"
    if how == UP_TO_TIES:
        return ties_apart(oracle.arrays, after.arrays)
    if how == STOCHASTIC_TWIN:
        wide = [label for label, a, paired in zip(after.labels, after.arrays, after.paired,
                                                  strict=True)
                if paired and (a.view(np.uint32) & 0xFFFF).any()]
        assert not wide, f"{what} of {wide} are not their bfloat16 weights widened"
    if how == CLOSE and len(before.arrays) == len(after.arrays):
        P.assert_close(after.arrays, oracle.arrays, before.arrays, dtype, list(after.labels),
                       ulps=CLOSE_ULPS, what=what)
    else:
        P.assert_bitwise(after.arrays, oracle.arrays, list(after.labels), what)
    return 0
