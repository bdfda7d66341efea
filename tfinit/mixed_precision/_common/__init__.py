"""What ``tfinit.mixed_precision`` does the same way on every backend: the pair kinds and the
pairing rule, the scope stack, the dtype policy, the optimizer core, the hooks a scope leaves
on layers and models, weight files and the replica report. It asks no backend (no backend
import, no ``keras.backend.backend()``): the chosen backend folder supplies what differs.
Private: the package module is the public face."""
