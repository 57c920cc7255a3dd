"""The GPU battery (benchmarks/gpu_battery.py) by role: its stages and their estimates
(stages), the plan and the device calls it fits into (calls), running a stage and reading
its figures (running), the summary and the pack that comes back (pack)."""
