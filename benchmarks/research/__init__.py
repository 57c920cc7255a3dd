"""The research that decided how `compare` times a run on a CPU (docs/research/cpu-timing.md):
scripts run from the checkout's root as `python -m benchmarks.research.NAME`; nothing in
compare/ imports them."""
