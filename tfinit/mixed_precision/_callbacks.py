"""``EarlyStopping`` that restores the best fp32 masters, not their 16-bit copies."""

import keras

from tfinit.mixed_precision._master_weights import get_master_weights


class EarlyStopping(keras.callbacks.EarlyStopping):
    """Drop-in ``keras.callbacks.EarlyStopping`` whose ``restore_best_weights`` is exact.

    Keras's own callback records ``model.get_weights()``: in pseudo_fp16 those are the
    16-bit copies, so restoring them rounds every master to 16 bits. This one records
    :func:`get_master_weights`; Keras's own restore then assigns those fp32 arrays, which
    sets every master exactly and re-casts its copy. Everything else is Keras's.

    Args:
        **kwargs: the arguments of ``keras.callbacks.EarlyStopping`` (``monitor``,
            ``min_delta``, ``patience``, ``verbose``, ``mode``, ``baseline``,
            ``restore_best_weights``, ``start_from_epoch``), with the same meaning.

    Raises:
        ValueError: as ``keras.callbacks.EarlyStopping`` (e.g. a bad ``mode``).

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    >>> stop = mp.EarlyStopping(monitor="loss", patience=1, restore_best_weights=True)
    >>> _ = model.fit(np.ones((4, 2)), np.zeros((4, 1)), epochs=2, callbacks=[stop],
    ...               verbose=0)
    >>> [w.dtype.name for w in stop.best_weights]       # the masters, not fp16 copies
    ['float32', 'float32']
    """

    def on_epoch_end(self, epoch, logs=None):
        recorded = self.best_weights
        super().on_epoch_end(epoch, logs)
        if self.best_weights is not None and self.best_weights is not recorded:
            self.best_weights = get_master_weights(self.model)
