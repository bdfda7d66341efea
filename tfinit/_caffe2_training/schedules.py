"""Caffe2's ``LearningRate`` operator as a Keras learning-rate schedule.

Caffe2 (``sgd/learning_rate_op.h``, ``learning_rate_functors.h``, float32): the op outputs
``base_lr * f(iter)``, ``f`` the policy's multiplier, ``iter`` the int64 iteration blob that
brew's ``Iter`` op increments *before* the rate is computed, so update ``n`` (1-based) reads
``iter = n``. Keras's ``optimizer.iterations`` holds ``k = n - 1`` during that update, so the
schedule evaluates ``f(k + 1)``. Every policy is computed with ``keras.ops`` in float32
(integer divisions on int32), on any Keras backend. Argument names and defaults are Caffe2's.
"""

import math

import keras
import numpy as np
from keras import ops

_INT, _FLOAT, _BOOL = "int", "float", "bool"

#: policy -> {argument: (kind, Caffe2's default)}, as ``createLearningRateFunctor`` reads them
POLICIES = {
    "fixed": {},
    "alter": {"active_first": (_BOOL, True), "active_period": (_INT, -1),
              "inactive_period": (_INT, -1)},
    "hill": {"num_iter": (_INT, 0), "start_multiplier": (_FLOAT, 0.0), "gamma": (_FLOAT, 0.0),
             "power": (_FLOAT, 0.0), "end_multiplier": (_FLOAT, 0.0)},
    "slope": {"num_iter_1": (_INT, 0), "multiplier_1": (_FLOAT, 0.0), "num_iter_2": (_INT, 0),
              "multiplier_2": (_FLOAT, 0.0)},
    "step": {"stepsize": (_INT, 0), "gamma": (_FLOAT, 0.0)},
    "exp": {"gamma": (_FLOAT, 0.0)},
    "gate": {"multiplier_1": (_FLOAT, 1.0), "multiplier_2": (_FLOAT, 1.0), "num_iter": (_INT, 0)},
    "inv": {"gamma": (_FLOAT, 0.0), "power": (_FLOAT, 0.0)},
    "poly": {"max_iter": (_INT, -1), "power": (_FLOAT, 0.0)},
    "linearWarmup": {"start_multiplier": (_FLOAT, 0.0), "num_iter": (_INT, 0)},
    "constantWarmup": {"multiplier": (_FLOAT, 0.5), "num_iter": (_INT, 0)},
    "pieceWarmup": {"m1": (_FLOAT, 0.5), "n1": (_INT, 0), "m2": (_FLOAT, 0.5), "n2": (_INT, 0),
                    "m3": (_FLOAT, 0.5)},
    "composite": {},  # sub_policy_num_iters and sub_policy_<i>_* (see _composite)
    "cyclical": {"max_lr": (_FLOAT, 0.005), "stepsize": (_INT, 0), "decay": (_FLOAT, 1.0)},
    "constantThenLinearWarmup": {
        "start_warmup_multiplier": (_FLOAT, 0.1), "constant_warmup_num_iter": (_INT, 10000000),
        "linear_warmup_num_iter": (_INT, 10000000)},
    "compositeCyclical": {
        "start_warmup_multiplier": (_FLOAT, 0.1), "constant_warmup_num_iter": (_INT, 10000000),
        "linear_warmup_num_iter": (_INT, 10000000), "cyclical_max_lr": (_FLOAT, 0.05),
        "cyclical_step_size": (_INT, 1000000), "cyclical_decay": (_FLOAT, 1.0)},
    "cosine": {"max_lr": (_FLOAT, 0.5), "min_lr": (_FLOAT, 0.1), "period": (_INT, 50),
               "t_mult": (_FLOAT, 1.0), "lr_shrink": (_FLOAT, 0.99)},
    "compositeCosine": {
        "start_warmup_multiplier": (_FLOAT, 0.1), "constant_warmup_num_iter": (_INT, 10000000),
        "linear_warmup_num_iter": (_INT, 10000000), "cosine_max_lr": (_FLOAT, 0.5),
        "cosine_min_lr": (_FLOAT, 0.1), "cosine_period": (_INT, 50),
        "cosine_t_mult": (_FLOAT, 1.0), "cosine_lr_shrink": (_FLOAT, 0.99)},
}
WHO = "tfinit.caffe2.learning_rate"


def policies():
    """The names of Caffe2's ``LearningRate`` policies, sorted.

    Returns:
        A list of policy names.

    Example:

    >>> import tfinit.caffe2
    >>> "linearWarmup" in tfinit.caffe2.learning_rate_policies()
    True
    """
    return sorted(POLICIES)


def _f(x):
    return ops.cast(x, "float32")


def _where(cond, a, b):
    return ops.where(cond, _f(a), _f(b))


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _typed(policy, name, kind, value):
    """One argument as Caffe2 reads it (``GetSingleArgument<int|float|bool>``)."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0].item()
    if isinstance(value, np.generic):
        value = value.item()
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    if kind == _INT and ok and float(value) == int(value):
        return int(value)
    if kind == _BOOL and ok and value in (0, 1):
        return bool(value)
    if kind == _FLOAT and ok:
        return float(np.float32(value))
    expected = {_INT: "an integer", _BOOL: "a bool (or 0/1)", _FLOAT: "a finite number"}[kind]
    raise TypeError(f"{WHO}: policy {policy!r}: Argument `{name}` must be {expected}. "
                    f"Received: {name}={value!r}.")


def parse_args(policy, args, prefix=""):
    """``{argument: typed value}`` for ``policy``: Caffe2's defaults, then ``args``."""
    spec = POLICIES[policy]
    unknown = sorted(set(args) - set(spec))
    if unknown:
        hint = (" (build_sgd's weight_decay reaches Caffe2's LearningRate op, which ignores "
                "it; brew's decay is Caffe2MomentumSGD(caffe2_weight_decay=))"
                if "weight_decay" in unknown else "")
        raise TypeError(f"{WHO}: policy {policy!r} takes no argument "
                        f"{', '.join(prefix + u for u in unknown)}; it takes "
                        f"{sorted(prefix + s for s in spec) or 'none'}{hint}.")
    return {name: _typed(policy, prefix + name, kind, args.get(name, default))
            for name, (kind, default) in spec.items()}


def _require(ok, policy, message):
    if not ok:
        raise ValueError(f"{WHO}: policy {policy!r}: {message}")


# ---------------------------------------------------------------- the functors


def _linear_warmup(it, start, num_iter):
    ramp = _f(start) + (1.0 - _f(start)) * _f(it) / _f(max(num_iter, 1))
    return _where(it >= num_iter, 1.0, ramp)


def _inv(it, gamma, power):
    return ops.power(1.0 + _f(gamma) * _f(it), _f(-power))


def _constant_then_linear(it, start, n_const, n_lin):
    return _where(it < n_const, _where(it >= n_const, 1.0, start),
                  _where(it < n_const + n_lin, _linear_warmup(it - n_const, start, n_lin), 1.0))


def _cyclical(it, base_lr, max_lr, stepsize, decay):
    cycle = ops.floor_divide(it, 2 * stepsize) + 1
    x = ops.abs(_f(it) / _f(stepsize) - _f(2 * cycle) + 1.0)
    ratio = _f(abs(max_lr)) / _f(abs(base_lr)) - 1.0
    return 1.0 + ratio * ops.maximum(0.0, 1.0 - x) * ops.power(
        _f(decay), _f(ops.floor_divide(it, 2 * stepsize)))


def _cosine(it, min_lr, max_lr, period, t_mult, lr_shrink):
    itf = _f(it)
    if t_mult != 1.0:
        i = ops.floor(ops.log(1.0 - itf / period * (1.0 - t_mult)) / math.log(t_mult))
        t_i = ops.power(_f(t_mult), i) * period
        t_curr = itf - (1.0 - ops.power(_f(t_mult), i)) / (1.0 - t_mult) * period
    else:
        i = ops.floor(itf / period)
        t_i = _f(period)
        t_curr = itf - t_i * i
    shrink = ops.power(_f(lr_shrink), i)
    low, high = _f(min_lr) * shrink, _f(max_lr) * shrink
    return low + 0.5 * (high - low) * (1.0 + ops.cos(math.pi * t_curr / t_i))


def _multiplier(policy, a, it, base_lr):
    """Caffe2's ``f(iter)`` for ``policy`` with parsed arguments ``a`` (int32 ``it``)."""
    if policy == "fixed":
        return _f(ops.ones_like(it))
    if policy == "alter":
        period = a["active_period"] + a["inactive_period"]
        first = a["active_first"]
        inside = ops.mod(it, period) < (a["active_period"] if first else a["inactive_period"])
        return _where(inside, 1.0 if first else 0.0, 0.0 if first else 1.0)
    if policy == "hill":
        after = ops.maximum(_f(a["end_multiplier"]),
                            _inv(it - a["num_iter"], a["gamma"], a["power"]))
        return _where(it < a["num_iter"],
                      _linear_warmup(it, a["start_multiplier"], a["num_iter"]), after)
    if policy == "slope":
        n1, m1, n2, m2 = a["num_iter_1"], a["multiplier_1"], a["num_iter_2"], a["multiplier_2"]
        line = _f(m1) + _f(it - n1) * _f(m2 - m1) / _f(n2 - n1)
        return _where(it < n1, m1, ops.maximum(_f(m2), line))
    if policy == "step":
        return ops.power(_f(a["gamma"]), _f(ops.floor_divide(it, a["stepsize"])))
    if policy == "exp":
        return ops.power(_f(a["gamma"]), _f(it))
    if policy == "gate":
        return _where(it >= a["num_iter"], a["multiplier_2"], a["multiplier_1"])
    if policy == "inv":
        return _inv(it, a["gamma"], a["power"])
    if policy == "poly":
        return ops.power(1.0 - _f(it) / _f(a["max_iter"]), _f(a["power"]))
    if policy == "linearWarmup":
        return _linear_warmup(it, a["start_multiplier"], a["num_iter"])
    if policy == "constantWarmup":
        return _where(it >= a["num_iter"], 1.0, a["multiplier"])
    if policy == "pieceWarmup":
        return _where(it < a["n1"], a["m1"], _where(it < a["n2"], a["m2"], a["m3"]))
    if policy == "cyclical":
        return _cyclical(it, base_lr, a["max_lr"], a["stepsize"], a["decay"])
    if policy == "constantThenLinearWarmup":
        return _constant_then_linear(it, a["start_warmup_multiplier"],
                                     a["constant_warmup_num_iter"], a["linear_warmup_num_iter"])
    if policy in ("compositeCyclical", "compositeCosine"):
        warm = a["constant_warmup_num_iter"] + a["linear_warmup_num_iter"]
        head = _constant_then_linear(it, a["start_warmup_multiplier"],
                                     a["constant_warmup_num_iter"], a["linear_warmup_num_iter"])
        if policy == "compositeCyclical":
            tail = _cyclical(it - warm, base_lr, a["cyclical_max_lr"], a["cyclical_step_size"],
                             a["cyclical_decay"])
        else:
            tail = _cosine(it - warm, a["cosine_min_lr"], a["cosine_max_lr"],
                           a["cosine_period"], a["cosine_t_mult"], a["cosine_lr_shrink"])
        return _where(it < warm, head, tail)
    if policy == "cosine":
        return _cosine(it, a["min_lr"], a["max_lr"], a["period"], a["t_mult"], a["lr_shrink"])
    if policy == "composite":
        # Sub-policy i covers iterations [start_i, start_i + num_iters[i]), start_0 = 1, and
        # reads the net's own iteration (not one relative to its start); the last one
        # continues past its end. Iteration 0 falls to the first (Caffe2 reads before it).
        rate = None
        for start, scale, sub, sub_args in a["subs"]:
            value = _multiplier(sub, sub_args, it, base_lr) * _f(scale)
            rate = value if rate is None else _where(it >= start, value, rate)
        return rate
    raise AssertionError(policy)


def _check(policy, a):
    """The ``DCHECK``s / ``CAFFE_ENFORCE``s of Caffe2's constructor, as ValueErrors."""
    positive = {"step": ("stepsize", "gamma"), "exp": ("gamma",), "inv": ("gamma", "power"),
                "poly": ("power", "max_iter"), "cyclical": ("stepsize",), "cosine": ("period",),
                "hill": ("num_iter", "gamma", "power"), "slope": ("num_iter_1",),
                "constantWarmup": ("multiplier",), "compositeCosine": ("cosine_period",),
                "compositeCyclical": ("cyclical_step_size",)}
    for name in positive.get(policy, ()):
        _require(a[name] > 0, policy, f"Argument `{name}` must be > 0. Received: "
                                      f"{name}={a[name]!r}.")
    if policy == "alter":
        for name in ("active_period", "inactive_period"):
            _require(a[name] >= 0, policy, f"Argument `{name}` must be given (>= 0). "
                                           f"Received: {name}={a[name]!r}.")
        _require(a["active_period"] + a["inactive_period"] > 0, policy,
                 "`active_period` + `inactive_period` must be > 0.")
    if policy == "slope":
        _require(a["num_iter_2"] > a["num_iter_1"], policy,
                 f"Argument `num_iter_2` must be > num_iter_1={a['num_iter_1']}. "
                 f"Received: num_iter_2={a['num_iter_2']}.")
    if policy == "cosine":
        _require(a["max_lr"] >= a["min_lr"], policy, "Argument `max_lr` must be >= `min_lr`.")


def _parse_composite(args):
    args = dict(args)
    iters = args.pop("sub_policy_num_iters", None)
    if isinstance(iters, np.ndarray):
        iters = iters.tolist()
    if not isinstance(iters, (list, tuple)) or not iters or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0
            for n in iters):
        raise ValueError(f"{WHO}: policy 'composite': Argument `sub_policy_num_iters` must be "
                         f"a non-empty list of positive integers. Received: "
                         f"sub_policy_num_iters={iters!r}.")
    subs, start = [], 1
    for i, count in enumerate(iters):
        prefix = f"sub_policy_{i}_"
        mine = {k[len(prefix):]: args.pop(k) for k in list(args) if k.startswith(prefix)}
        sub = _text(mine.pop("policy", ""))
        scale = float(np.float32(mine.pop("lr_scale", 1.0)))
        if sub == "composite":
            raise ValueError(f"{WHO}: policy 'composite': sub-policy {i} cannot be composite "
                             "(Caffe2 refuses it too).")
        _known(sub, f"`{prefix}policy`")
        sub_args = parse_args(sub, mine, prefix)
        _check(sub, sub_args)
        subs.append((start, scale, sub, sub_args))
        start += int(count)
    if args:
        raise TypeError(f"{WHO}: policy 'composite' takes no argument {', '.join(sorted(args))}; "
                        f"it takes sub_policy_num_iters and sub_policy_<i>_<argument> for "
                        f"i < {len(iters)}.")
    return {"subs": subs}


def _known(policy, what="`policy`"):
    if policy not in POLICIES:
        raise ValueError(f"{WHO}: Argument {what} must be one of Caffe2's LearningRate "
                         f"policies {sorted(POLICIES)}. Received: {policy!r}.")


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2LearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """Caffe2's ``LearningRate`` op: the rate at Keras step ``k`` is Caffe2's at iteration
    ``k + 1``. Usually built with :func:`tfinit.caffe2.learning_rate`.

    Args:
        policy: a Caffe2 policy name (``learning_rate_policies()``).
        base_lr: the positive base rate.
        **args: the policy's Caffe2 arguments, by Caffe2's names.

    Raises:
        ValueError, TypeError: as :func:`tfinit.caffe2.learning_rate`.

    Example:

    >>> import keras
    >>> from tfinit.caffe2 import Caffe2LearningRate
    >>> lr = Caffe2LearningRate("linearWarmup", 0.1, start_multiplier=0.5, num_iter=4)
    >>> [round(float(lr(k)), 4) for k in range(4)]       # iterations 1..4
    [0.0625, 0.075, 0.0875, 0.1]
    >>> keras.optimizers.schedules.deserialize(
    ...     keras.optimizers.schedules.serialize(lr)).get_config()
    {'policy': 'linearWarmup', 'base_lr': 0.1, 'start_multiplier': 0.5, 'num_iter': 4}
    """

    def __init__(self, policy, base_lr, **args):
        policy = _text(policy)
        _known(policy)
        if (not isinstance(base_lr, (int, float, np.floating, np.integer))
                or isinstance(base_lr, bool) or not base_lr > 0 or not math.isfinite(base_lr)):
            raise ValueError(f"{WHO}: Argument `base_lr` must be a positive number (the rate "
                             f"Caffe2 stores negated). Received: base_lr={base_lr!r}.")
        self.policy = policy
        self.base_lr = float(base_lr)
        self.args = {k: (v.tolist() if isinstance(v, np.ndarray) else _text(v))
                     for k, v in args.items()}
        if policy == "composite":
            self._parsed = _parse_composite(self.args)
        else:
            self._parsed = parse_args(policy, self.args)
            _check(policy, self._parsed)

    def __call__(self, step):
        it = ops.cast(step, "int32") + 1  # brew's Iter runs before LearningRate
        rate = _f(self.base_lr) * _multiplier(self.policy, self._parsed, it, self.base_lr)
        return rate

    def get_config(self):
        return {"policy": self.policy, "base_lr": self.base_lr, **self.args}

    def __repr__(self):
        args = "".join(f", {k}={v!r}" for k, v in self.args.items())
        return f"learning_rate({self.policy!r}, base_lr={self.base_lr!r}{args})"


def learning_rate(policy, base_lr=None, **args):
    """Caffe2's ``LearningRate`` op as a Keras ``LearningRateSchedule``.

    The schedule's value at Keras step ``k`` (``optimizer.iterations`` during update
    ``k + 1``) is the rate Caffe2's ``(k + 1)``-th update uses: brew's ``Iter`` op increments
    the iteration blob before ``LearningRate`` reads it. Every policy of Caffe2's op
    (``sgd/learning_rate_op.h``) is here with its argument names and defaults; values are
    computed in float32 with ``keras.ops`` (any backend). It serializes with Keras
    (``get_config`` holds the policy, ``base_lr`` and the arguments).

    Args:
        policy: a policy name (``"step"``, ``"inv"``, ``"composite"``...), or a
            ``LearningRate`` :class:`Operator` read from a net (``base_lr`` and ``args`` then
            come from it; its negated ``base_lr`` is made positive).
        base_lr: the positive base rate (Caffe2 stores it negated for the WeightedSum
            update; ``build_sgd`` with momentum stores it positive).
        **args: the policy's Caffe2 arguments (``stepsize``, ``gamma``, ``power``,
            ``sub_policy_num_iters``, ``sub_policy_0_policy``...).

    Returns:
        A ``Caffe2LearningRate`` (a ``keras.optimizers.schedules.LearningRateSchedule``).

    Raises:
        ValueError: an unknown policy (the known ones listed), a ``base_lr`` that is not
            positive, or an argument Caffe2's op refuses (``stepsize=0``...).
        TypeError: an argument the policy does not take, or of the wrong type.

    Example:

    >>> import tfinit.caffe2
    >>> lr = tfinit.caffe2.learning_rate("step", base_lr=0.1, stepsize=2, gamma=0.5)
    >>> [round(float(lr(k)), 4) for k in range(5)]    # Caffe2's iterations 1..5
    [0.1, 0.05, 0.05, 0.025, 0.025]
    >>> from tfinit.caffe2 import Operator
    >>> op = Operator("LearningRate", ("iter",), ("lr",),
    ...               {"base_lr": -0.1, "policy": b"inv", "gamma": 0.5, "power": 1.0})
    >>> round(float(tfinit.caffe2.learning_rate(op)(0)), 4)    # 0.1 / (1 + 0.5 * 1)
    0.0667
    >>> tfinit.caffe2.learning_rate("linear", base_lr=0.1)
    Traceback (most recent call last):
    ...
    ValueError: tfinit.caffe2.learning_rate: Argument `policy` must be one of Caffe2's ...
    """
    if hasattr(policy, "type") and hasattr(policy, "args"):
        if policy.type != "LearningRate":
            raise ValueError(f"{WHO}: Argument `policy` must be a policy name or a "
                             f"LearningRate operator. Received: a {policy.type} operator.")
        if base_lr is not None or args:
            raise TypeError(f"{WHO}: built from a LearningRate operator, base_lr and the "
                            "arguments come from it; pass no others.")
        op_args = dict(policy.args)
        if "base_lr" not in op_args or "policy" not in op_args:
            raise ValueError(f"{WHO}: the LearningRate operator {policy.name!r} lacks "
                             "`base_lr` or `policy` (Caffe2 refuses it too).")
        base = abs(float(op_args.pop("base_lr")))
        # Caffe2's op reads its own arguments and ignores the rest (build_sgd passes its
        # extra keywords, weight_decay among them, to this op).
        name = _text(op_args["policy"])
        if name in POLICIES:
            op_args = {k: v for k, v in op_args.items() if k == "policy" or (
                k.startswith("sub_policy_") if name == "composite" else k in POLICIES[name])}
        return Caffe2LearningRate(op_args.pop("policy"), base, **op_args)
    if base_lr is None:
        raise TypeError(f"{WHO}: Argument `base_lr` is required with a policy name "
                        f"(policy={policy!r}).")
    return Caffe2LearningRate(policy, base_lr, **args)
