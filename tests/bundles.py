"""A TensorFlow bundle as the GPU battery finds one activated, for tests of its cuDNN choice."""

from __future__ import annotations

from pathlib import Path


def activated_bundle(tmp_path: Path, monkeypatch) -> Path:
    """A TensorFlow bundle's site folder with a fallback cuDNN unpacked, activated on the
    machine's cuDNN: its activate.sh puts its own CUDA 12 cuDNN on LD_LIBRARY_PATH where it is
    unpacked, unless given `machine`, as the bundle's does."""
    site = tmp_path / "tfgpu" / "site"
    (site / "nvidia" / "cudnn_cu12_fallback" / "lib").mkdir(parents=True)
    (site / "activate.sh").write_text(
        'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\n'
        'libs=/machine/nvidia/cudnn/lib\n'  # the real one's rule: CUDA 12's where unpacked
        'if [ "${1:-}" != machine ] && [ -d "$here/nvidia/cudnn_cu12_fallback/lib" ]; then '
        'libs="$here/nvidia/cudnn_cu12_fallback/lib"; fi\n'
        'export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" '
        'LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n')
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/machine/nvidia/cudnn/lib:/usr/lib")
    return site
