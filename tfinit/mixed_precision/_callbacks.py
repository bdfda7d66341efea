"""``EarlyStopping`` that restores the best fp32 masters, not their 16-bit copies."""

import keras

from tfinit.mixed_precision import _weights


class EarlyStopping(keras.callbacks.EarlyStopping):
    """Drop-in ``keras.callbacks.EarlyStopping`` whose ``restore_best_weights`` is exact.

    Keras's own callback records ``model.get_weights()``: in pseudo_fp16 those are the
    16-bit copies, so restoring them rounds every master to 16 bits. This one records
    :func:`get_master_weights`; Keras's own restore then assigns those fp32 arrays, which
    sets every master exactly and re-casts its copy. Same arguments as
    ``keras.callbacks.EarlyStopping``.

    Example:

    >>> stop = tfinit.mixed_precision.EarlyStopping(patience=2, restore_best_weights=True)
    >>> model.fit(x, y, epochs=50, callbacks=[stop])
    """

    def on_epoch_end(self, epoch, logs=None):
        recorded = self.best_weights
        super().on_epoch_end(epoch, logs)
        if self.best_weights is not None and self.best_weights is not recorded:
            self.best_weights = _weights.get_master_weights(self.model)
