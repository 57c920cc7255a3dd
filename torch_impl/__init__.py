"""PyTorch implementation: imports torch/torchvision only here."""
