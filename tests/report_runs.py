"""Result files as trainers write them, with chosen figures, for the report tests."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from compare import files, schema

PASSED = {"passed": True, "steps": 3, "tolerances": {}}  # a parity record that passed
H100 = {"device_used": "GPU: NVIDIA H100 80GB HBM3", "platform": "Linux-6.8-x86_64-with-glibc2.39"}


LAPTOP_CPU = {"device_used": "CPU (no GPU found), 1 logical device(s)",
              "platform": "Linux-6.1-x86_64-with-glibc2.36"}


def fake_result(framework: str, seed: int, train_time: float, accuracy: float,
                status: str = "completed", epochs: int = 2, error: str | None = None,
                environment: dict | None = None, precision: str = "fp32") -> dict:
    """A result.json as a trainer writes it, with chosen figures."""
    records = [{"epoch": e, "train_loss": 1.0 / e, "test_loss": 1.2 / e,
                "test_accuracy": accuracy * e / epochs, "train_time_s": train_time / epochs,
                "eval_time_s": 0.5, "images_per_s": 1000.0 * epochs / train_time, "images": 500,
                "input_wait_s": 0.1, "steps": 10} for e in range(1, epochs + 1)]
    summary = {"final_test_accuracy": None, "best_test_accuracy": None, "train_time_s": 0.0,
               "warmup_time_s": None, "steady_step_time_ms": {"median": None, "p90": None},
               "images_per_s": None, "input_wait_fraction": None,
               "peak_device_memory_bytes": None, "replicas": 1,
               "train_flops_per_image": 3_910_320, "status": status}
    if records:
        summary.update(final_test_accuracy=accuracy, best_test_accuracy=accuracy,
                       train_time_s=train_time, warmup_time_s=train_time / epochs,
                       images_per_s=1000.0 * epochs / train_time, input_wait_fraction=0.05,
                       eval_time_s=1.0, epochs_completed=epochs,
                       steady_step_time_ms={"median": train_time, "p90": train_time * 1.1})
    environment = environment or LAPTOP_CPU
    kind = "gpu" if environment["device_used"].startswith("GPU") else "cpu"
    return {"schema_version": 1, "framework": framework,
            "model": {"name": "lenet", "parameters": 62006},
            "config": {"framework": framework, "seed": seed, "model": "lenet",
                       "dataset": "synthetic", "precision": precision,
                       "pipeline": {"kind": "tuned"}},
            "data": {"source": "synthetic", "origin": "generated", "train_size": 5000,
                     "test_size": 1000},
            "environment": {**environment,
                            ("torch" if framework == "torch" else "tensorflow"): "x.y"},
            "fairness": {"precision_policy": "float32", "global_batch": 32, "device_kind": kind},
            "measurement": schema.MEASUREMENT, "epochs": records, "summary": summary,
            "error": error}


def as_read(result: dict) -> schema.Result:
    """`result` as compare.schema.read_result gives it back: migrated, its summary a record."""
    return schema.validate_result(schema.migrate_result(result))


def write_runs(root: Path, runs: list[dict], parity: dict | None = None) -> None:
    """Result files as `compare` leaves them, with per-step and per-window CSVs, and the
    parity record in summary.json."""
    for r in runs:
        run_dir = root / "runs" / f"{r['framework']}-seed{r['config']['seed']}"
        files.write_json(run_dir / "result.json", r)
        step_ms = r["summary"]["train_time_s"]  # the fixture's step time, ms
        (run_dir / "steps.csv").write_text("global_step,epoch,lr,loss\n" + "".join(
            f"{s},{1 + s // 10},0.01,{2.3 / (1 + 0.1 * s):.4f}\n" for s in range(20)))
        windows = [f"{e},{10 * (e - 1) + 5 * w},5,{5 * step_ms / 1000 * (1 + 0.1 * w):.5f},0.001\n"
                   for e in (1, 2) for w in (0, 1)]  # two 5-step windows per epoch
        (run_dir / "windows.csv").write_text("epoch,first_step,steps,seconds,input_wait_s\n"
                                             + "".join(windows))
    if parity is not None:
        files.write_json(root / "summary.json", {"parity": parity, "command": "x"})


class Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "poster") and value \
                    and not value.startswith("#"):
                self.external.append((tag, name, value))
        if tag in ("link", "iframe", "img"):  # an inline <script> fetches nothing
            self.external.append((tag, "", ""))


def three_seeds(root: Path, tf_times=(10.0, 12.0, 11.0), torch_times=(8.0, 8.0, 8.0),
                tf_accuracy=(0.60, 0.62, 0.61), torch_accuracy=(0.58, 0.58, 0.58),
                environment: dict | None = None, parity: dict | None = PASSED) -> None:
    write_runs(root, [fake_result(fw, seed, t, a, environment=environment)
                      for fw, times, accuracies in (("tf", tf_times, tf_accuracy),
                                                    ("torch", torch_times, torch_accuracy))
                      for seed, (t, a) in enumerate(zip(times, accuracies))], parity)
