#!/usr/bin/env bash
# Run a command as on an x86-64 CPU with AVX2 and no AVX-512 or bfloat16 instructions, from any
# x86-64 machine:   tests/as_avx2_cpu.sh .venv/bin/pytest -m machine_sensitive
#
# - ONEDNN_MAX_CPU_ISA=AVX2: oneDNN (TensorFlow's and PyTorch's CPU convolutions) uses AVX2
#   kernels at most.
# - ATEN_CPU_CAPABILITY=avx2: PyTorch's own kernels dispatch to their AVX2 builds; bfloat16
#   autocast then runs emulated, as on such a CPU (ResNet-9 on an AMD EPYC with AVX512-BF16:
#   mixed took 19.5x float32's time in PyTorch and 9.7x in TensorFlow this way, against 0.63x
#   and 0.79x unlimited; benchmarks/setting_ab.py, benchmarks/results/cpu-epyc-2core/
#   precision-resnet9-as-avx2.md and precision-resnet9.md).
# - TF_ENABLE_ONEDNN_OPTS=0: TensorFlow decides from the CPU's own instructions, not from
#   oneDNN's cap, that it may hand bfloat16 convolutions to oneDNN, which then refuses them
#   ("could not create a primitive descriptor"); without oneDNN it runs Eigen's kernels, which
#   its wheel builds for AVX2, and emulates bfloat16 as an AVX2-only CPU does.
# - CNNCOMPARE_CPU_FLAGS: the CPU flags cnncompare reads (compare/machine/cpu.py),
#   those of an AVX2-only CPU.
# - TORCHINDUCTOR_CACHE_DIR: a kernel cache of its own. torch.compile's on-disk cache does not
#   key on ATEN_CPU_CAPABILITY: kernels compiled earlier at the CPU's own AVX-512 are reused
#   under the AVX2 limit and compute garbage (measured: losses 2.9, 2.8e5, nan against eager's
#   2.30; with a cache of its own they agree).
set -euo pipefail
export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 TF_ENABLE_ONEDNN_OPTS=0
export TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/torchinductor-as-avx2-$(id -u)"
export CNNCOMPARE_CPU_FLAGS="fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx f16c fma avx2 bmi1 bmi2"
exec "$@"
