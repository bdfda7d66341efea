"""Side-by-side benchmarks of tfinit against the Keras/TensorFlow built-ins."""
