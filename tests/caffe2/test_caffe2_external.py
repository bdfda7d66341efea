"""ExternalInitializer with a real Caffe2 init_net (needs tfinit.initializers, on main)."""

import numpy as np
import pytest

from caffe2_nets import models_dir


def test_external_initializer_reads_the_exported_mlp_init_net():
    from tfinit.initializers import ExternalInitializer

    models = models_dir()
    ref = np.load(models / "mlp_forward.npz", allow_pickle=False)
    for source in (str(models / "mlp_init_net.pb"), (models / "mlp_init_net.pb").read_bytes()):
        init = ExternalInitializer(source)
        info = init.create_param("fc1_w", [16, 10])  # Caffe2 layout, as brew asks for it
        np.testing.assert_array_equal(np.asarray(info.param.numpy()), ref["param/fc1_w"])
        with pytest.raises(KeyError, match="fc9_w"):
            init.create_param("fc9_w", [3, 3])
        with pytest.raises(ValueError, match="transposed"):
            init.create_param("fc2_w", [16, 8])
