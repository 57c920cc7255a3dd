"""TensorFlow/Keras implementation: imports tensorflow/keras only here."""
