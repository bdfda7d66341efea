"""Registry of Caffe2 fill operator names -> tfinit initializer classes.

Kept apart from the classes so that lookups (``tfinit.get``, the initializer family,
the Caffe2 importer) share one table and one error message for unknown names.
"""

import difflib
import inspect

import keras

_FILL_OPS = {}


def register(cls):
    """Class decorator: record ``cls`` under its class name (Caffe2's op name)."""
    _FILL_OPS[cls.__name__] = cls
    return cls


def fill_ops():
    """The Caffe2 fill operator names tfinit implements, sorted.

    Each name is a ``tfinit`` class, a Keras initializer identifier once tfinit is imported
    (``Dense(4, kernel_initializer="XavierFill")``) and a name ``tfinit.get`` accepts.

    Returns:
        A sorted list of operator names.

    Example:

    >>> import tfinit
    >>> tfinit.fill_ops()[:4]
    ['ConstantFill', 'DiagonalFill', 'GaussianFill', 'GivenTensorBoolFill']
    >>> "XavierFill" in tfinit.fill_ops()
    True
    """
    return sorted(_FILL_OPS)


def lookup(name):
    """The class for a Caffe2 fill op name; ``ValueError`` listing close names."""
    if not isinstance(name, str):
        raise TypeError(
            "Argument `name` (a fill operator name) must be a string. "
            f"Received: name={name!r} (of type {type(name).__name__})."
        )
    try:
        return _FILL_OPS[name]
    except KeyError:
        close = difflib.get_close_matches(name, _FILL_OPS, n=3, cutoff=0.5)
        if not close:
            close = [n for n in _FILL_OPS if n.lower() == name.lower()]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown fill operator {name!r}.{hint} Known operators: {', '.join(fill_ops())}."
        ) from None


def build(name, kwargs=None):
    """Instantiate fill op ``name`` with ``kwargs``, naming any unexpected argument."""
    cls = lookup(name)
    kwargs = dict(kwargs or {})
    params = inspect.signature(cls.__init__).parameters
    accepted = [p for p in params if p != "self"]
    unknown = [k for k in kwargs if k not in accepted]
    if "rng" in unknown:
        random_ops = [n for n in fill_ops() if "rng" in inspect.signature(_FILL_OPS[n]).parameters]
        raise ValueError(
            f"{name}: Caffe2 draws no random numbers for {name}, so argument `rng` does not "
            f"apply; it applies to the random fills: {', '.join(random_ops)}."
        )
    if unknown:
        hints = {k: difflib.get_close_matches(k, accepted, n=1) for k in unknown}
        hint = "".join(f" Did you mean {v[0]!r} for {k!r}?" for k, v in hints.items() if v)
        raise TypeError(
            f"{name}: unexpected argument(s) {', '.join(map(repr, unknown))}; "
            f"{name} takes {', '.join(accepted) or 'no arguments'}.{hint}"
        )
    return cls(**kwargs)


def get(identifier):
    """A Keras initializer from a Caffe2 op name, a ``(name, kwargs)`` tuple as
    Caffe2's brew took it, a Keras config dict or name, an initializer, or None.

    The counterpart of ``keras.initializers.get`` that also knows Caffe2's names and
    brew's ``("GaussianFill", {"std": 0.01})`` form; a name tfinit does not know is
    passed on to Keras (``"glorot_uniform"``).

    Args:
        identifier: a fill operator name, an ``(op_name, kwargs_dict)`` pair, a Keras
            initializer (instance or class), a Keras config dict or name, a callable, or
            ``None``.

    Returns:
        A Keras initializer (``None`` for ``None``; instances and callables unchanged).

    Raises:
        ValueError: an unknown name (close matches named) or a bad argument value.
        TypeError: an unexpected argument name, a malformed tuple, or another type.

    Example:

    >>> import tfinit
    >>> tfinit.get(("GaussianFill", {"std": 0.01, "seed": 1}))
    GaussianFill(mean=0.0, std=0.01, seed=1, rng='keras')
    >>> tfinit.get("RangeFill")
    RangeFill()
    >>> tfinit.get("XavierFil")
    Traceback (most recent call last):
    ...
    ValueError: Unknown fill operator 'XavierFil'. Did you mean: XavierFill, ...
    """
    if identifier is None or isinstance(identifier, keras.initializers.Initializer):
        return identifier
    if isinstance(identifier, str):
        try:
            return build(identifier, {})
        except ValueError as ours:
            try:
                return keras.initializers.get(identifier)
            except ValueError:
                raise ours from None
    if isinstance(identifier, (tuple, list)):
        if len(identifier) != 2 or not isinstance(identifier[1], dict):
            raise TypeError(
                "tfinit.get: Argument `identifier` given as a tuple must be (op_name, "
                "kwargs_dict) as in Caffe2's brew, e.g. ('GaussianFill', {'std': 0.01}). "
                f"Received: identifier={identifier!r}."
            )
        return build(identifier[0], identifier[1])
    if isinstance(identifier, dict):
        return keras.initializers.get(identifier)
    if isinstance(identifier, type) and issubclass(identifier, keras.initializers.Initializer):
        return identifier()
    if callable(identifier):
        return identifier
    raise TypeError(
        "tfinit.get: Argument `identifier` must be a fill operator name, an (op_name, kwargs) "
        "tuple, a Keras initializer, a config dict or None. "
        f"Received: identifier={identifier!r} (of type {type(identifier).__name__})."
    )
