"""``init_net``: where ``create_param`` tracks the variables it creates, and its argument checks.

``init_net`` (optional) is a ``tf.Module`` (or any other TensorFlow trackable, e.g.
``tf.train.Checkpoint``), which gets the variables in its dict attribute ``tfinit_params``
(name -> variable; checkpoint keys ``<path>/tfinit_params/<name>/.ATTRIBUTES/VARIABLE_VALUE``),
or a ``dict``, which gets them as items. Every variable of a parameter is tracked. Creating a
name twice in one ``init_net`` is a ``ValueError``; a Keras layer or model is refused
(``TypeError``): it tracks only ``keras.Variable``s.
"""

from collections.abc import MutableMapping

import keras

from tfinit import _args, _backend
from tfinit.parameter_info import variable_name

#: what needs TensorFlow here, named in the error on another backend
_FEATURE = "creating TensorFlow variables (create_param)"

TRACKING_ATTRIBUTE = "tfinit_params"


def check_param_name(param_name, who):
    """``param_name`` if it is a non-empty string; else ``TypeError``."""
    if not isinstance(param_name, str) or not param_name:
        raise TypeError(
            f"{who}.create_param: Argument `param_name` must be a non-empty string. "
            f"Received: param_name={param_name!r} (of type {type(param_name).__name__})."
        )
    return param_name


def check_shape(shape, who):
    """``shape`` as a tuple of ints; the ``TypeError`` names Caffe2's positional order."""
    try:
        return _args.normalize_shape(shape, f"{who}.create_param")
    except TypeError as err:
        raise TypeError(
            f"{err} tfinit's signature is create_param(param_name, shape, init_net=None); "
            f"Caffe2's positional order was (param_name, init_net, shape): pass keywords."
        ) from None


def check_init_net(init_net, who):
    """``TypeError`` unless ``init_net`` is None, a dict or a TensorFlow trackable."""
    if init_net is None or isinstance(init_net, MutableMapping):
        return
    if isinstance(init_net, keras.layers.Layer):
        raise TypeError(
            f"{who}.create_param: init_net is a Keras {type(init_net).__name__}, which tracks "
            f"only keras.Variables, so its checkpoints would silently miss these variables. "
            f"Pass a tf.Module (or a dict), or create Keras weights with add_weight."
        )
    from tfinit import _keras_internals

    if not _keras_internals.is_trackable(init_net):
        raise TypeError(
            f"{who}.create_param: Argument `init_net` must be None, a tf.Module (or another "
            f"TensorFlow trackable) or a dict to track the variables in. "
            f"Received: init_net of type {type(init_net).__name__}."
        )


def _store(init_net, create=False):
    """The name -> variable container of ``init_net`` (None if it has none yet)."""
    if isinstance(init_net, MutableMapping):
        return init_net
    if getattr(init_net, TRACKING_ATTRIBUTE, None) is None:
        if not create:
            return None
        setattr(init_net, TRACKING_ATTRIBUTE, {})
    store = getattr(init_net, TRACKING_ATTRIBUTE)
    from tfinit import _keras_internals

    if not _keras_internals.is_tracked_container(store):
        raise TypeError(
            f"init_net {type(init_net).__name__}.{TRACKING_ATTRIBUTE} is a "
            f"{type(store).__name__}, which TensorFlow checkpoints do not track."
        )
    return store


def check_names_free(init_net, names):
    """``ValueError`` if ``init_net`` already tracks one of ``names``."""
    store = None if init_net is None else _store(init_net)
    taken = [n for n in names if store is not None and n in store]
    if taken:
        raise ValueError(
            f"init_net already holds a variable named {taken[0]!r}; parameter names must be "
            f"unique within one init_net."
        )


def scoped(names):
    """``names`` as the variables will be named inside the current ``tf.name_scope``."""
    scope = _backend.tensorflow(_FEATURE).get_current_name_scope()
    return [f"{scope}/{n}" if scope else n for n in names]


def track(init_net, info):
    """Record every variable of ``info`` in ``init_net`` (see the module docstring)."""
    if init_net is None:
        return
    names = [variable_name(v) for v in info.variables]
    check_names_free(init_net, names)
    store = _store(init_net, create=True)
    for name, variable in zip(names, info.variables, strict=True):
        store[name] = variable
