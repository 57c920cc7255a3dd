"""The two frameworks compared, declared once: their keys, their names in words, and the
package each imports. Everything that lists or names the frameworks reads them from here."""

from __future__ import annotations

FRAMEWORKS = ("tf", "torch")  # the order of every table, plot and loop: TensorFlow first
FRAMEWORK_NAMES = {"tf": "TensorFlow/Keras", "torch": "PyTorch"}
FRAMEWORK_PACKAGES = {"tf": "tensorflow", "torch": "torch"}  # what a version record names
