"""cnncompare: the same CNN experiment in TensorFlow/Keras and PyTorch, measured side by side.

This package is framework-neutral: it never imports tensorflow or torch at module level.
"""

__version__ = "0.1.0"
