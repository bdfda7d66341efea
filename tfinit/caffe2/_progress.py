"""Progress of long Caffe2 work, shown as Keras's ``fit`` shows it: ``verbose=0/1/2``.

``verbose=1`` prints a title line and a ``keras.utils.Progbar`` that moves as the work
goes (``verbose=2``: one line when it is done; ``0``, the default, prints nothing). Like
Keras, it writes to ``sys.stdout`` (the ``tfinit`` command sends it to stderr).
"""

import keras


def check_verbose(verbose, where):
    """``verbose`` as an int 0, 1 or 2 (``"auto"`` is 1, as in Keras's ``fit``)."""
    if verbose == "auto":
        return 1
    if verbose in (0, 1, 2) and not isinstance(verbose, (str, float)):
        return int(verbose)
    raise ValueError(f"{where}: Argument `verbose` must be 0 (silent), 1 (a progress bar), "
                     f"2 (one line when done) or 'auto', as in Keras's fit. Received: "
                     f"verbose={verbose!r}.")


class Progress:
    """A titled ``keras.utils.Progbar`` over ``total`` units; nothing at ``verbose=0``."""

    def __init__(self, verbose, title, total, unit):
        self._bar = None
        self._total = total
        self._done = None
        if verbose and total > 0:
            print(title, flush=True)
            self._bar = keras.utils.Progbar(total, verbose=verbose, unit_name=unit)

    def update(self, done):
        """``done`` of the ``total`` units are done (the bar finishes at ``total``)."""
        done = min(done, self._total)
        if self._bar is not None and done != self._done and self._done != self._total:
            self._done = done  # each count shown once; nothing after the bar is finished
            self._bar.update(done)

    def callback(self):
        """``update`` as a ``(done, total)`` callable for code below Keras, or None."""
        if self._bar is None:
            return None
        return lambda done, total: self.update(done)
