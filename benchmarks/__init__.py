"""Performance claims as scripts, each run from the checkout's root as
`python -m benchmarks.NAME` (its docstring gives the commands); their results are in
benchmarks/results/, and docs/benchmarks.md quotes them."""
