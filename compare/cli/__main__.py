"""`python -m compare.cli`: as torchrun starts a PyTorch process of a multi-machine run."""

from compare.cli.app import main

main()
