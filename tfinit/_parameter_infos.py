"""``parameter_infos(model)``: Caffe2's ``model.param_info``, every trainable weight's record.

Caffe2's ``ModelHelper`` lists a ``ParameterInfo`` for every parameter it created. A Keras
model's trainable weights are its parameters: a weight with a master/copy pair
(``tfinit.mixed_precision.scope``) gets the pair's record (``blob_copy``), every other one
(BatchNormalization's ``gamma``/``beta`` under a pseudo_fp16 scope, any fp32 model) a plain
record; each carries brew's tag read from its name (``bias``/``beta``/``*_b``: BIAS, else
WEIGHT).
"""

from tfinit.parameter_info import ParameterInfo, caffe2_tag


def parameter_infos(model):
    """A ``ParameterInfo`` for every trainable weight of ``model``, paired or not.

    Caffe2's ``model.param_info`` for a Keras model: in ``model.trainable_weights`` order,
    ``param`` is the weight the model computes with; a weight created in
    ``tfinit.mixed_precision.scope`` has its pair in ``blob_copy`` (as
    ``tfinit.mixed_precision.parameter_info``), the others ``blob_copy=None``. ``tags`` is
    brew's tag for the weight: ``("BIAS",)`` for ``bias``, ``beta`` or ``*_b``, else
    ``("WEIGHT",)`` (what brew's ``add_weight_decay`` reads). ``param_id`` is the position.

    Args:
        model: a Keras model or layer (anything with ``trainable_weights``), or a list of
            variables.

    Returns:
        A list of :class:`ParameterInfo`.

    Raises:
        TypeError: ``model`` has no ``trainable_weights`` and is not a list of variables.

    Example:

    >>> import keras, tfinit
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
    ...                           keras.layers.BatchNormalization()])
    >>> [(i.name, i.shape, i.tags) for i in tfinit.parameter_infos(model)]
    [('kernel', (3, 2), ('WEIGHT',)), ('bias', (2,), ('BIAS',)),
     ('gamma', (2,), ('WEIGHT',)), ('beta', (2,), ('BIAS',))]
    """
    if hasattr(model, "trainable_weights"):
        variables = list(model.trainable_weights)
    elif isinstance(model, (list, tuple)):
        variables = list(model)
    else:
        raise TypeError("parameter_infos: Argument `model` must be a Keras model or layer "
                        "(with `trainable_weights`) or a list of variables. Received: "
                        f"{type(model).__name__}.")
    from tfinit import mixed_precision  # above this module: imported when called

    infos = []
    for index, variable in enumerate(variables):
        try:
            pair = mixed_precision.parameter_info(variable)
        except ValueError:  # no master/copy pair: a plain record
            pair = None
        # A record of its own: the pair's record (shared by every caller) keeps its id and tags.
        infos.append(ParameterInfo(
            variable, tuple(variable.shape),
            blob_copy=dict(pair.blob_copy) if pair is not None else None,
            param_id=index, name=pair.name if pair is not None else None,
            tags=(caffe2_tag(variable),)))
    return infos
