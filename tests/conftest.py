"""Shared fixtures: an isolated cache, tiny datasets in every on-disk format (written by
cifar_files.py), small configs; the frameworks imported where tests run, the tiers."""

from __future__ import annotations

import functools
import gc
import importlib
import io
import os
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
from cifar_files import make_cifar_arrays, write_cifar_archive, write_image

from compare.experiment.config import PipelineConfig, RunConfig
from compare.experiment.frameworks import quiet_framework_logs

quiet_framework_logs()  # the tests import the frameworks themselves: quiet before they do

# pytest -n 2 runs two test processes on the machine's cores, each with its framework
# processes: OpenMP threads that wait spinning starve the other process's work (the quick
# tier took 4 min 46 s spinning, 4 min 9 s sleeping, on a 2-core Xeon). Sleeping changes
# when a thread wakes, not what it computes. Set before any framework loads its OpenMP,
# and inherited by every subprocess a test starts.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

torch = tf = None  # the frameworks, imported by pytest_configure where tests run


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which makes an unchosen --dist "load"
def pytest_cmdline_main(config):
    """Under pytest -n, a worker that runs out of tests takes the other's queued ones (unless
    the user chose a --dist): xdist's "load" leaves one worker alone with its queue at the
    end, tens of seconds of a 2-core machine's quick tier on one core."""
    if (getattr(config.option, "numprocesses", None) and config.option.dist == "no"
            and not config.option.distload):
        config.option.dist = "worksteal"


def pytest_configure(config):
    """Import the frameworks in every process that runs tests, before any test module is
    collected; not in `pytest -n`'s controller, which runs none and would spend 10-12 s on
    them (a 2-core AMD EPYC) before its workers start."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _import_frameworks()


def _import_frameworks() -> None:
    """The product never holds both frameworks in one process (each runs in its own), but the
    tests do. TensorFlow (XLA) and torch's compiler stack each bring LLVM; loaded in the order
    TF then torch._dynamo, LLVM aborts ("Option registered more than once"). torch first
    works. Either may be missing (a GPU machine may have only PyTorch): tests that need the
    missing one skip with the reason."""
    global torch, tf
    try:
        importlib.import_module("torch._dynamo")
        torch = importlib.import_module("torch")
    except ImportError:
        pass
    try:
        tf = importlib.import_module("tensorflow")
    except ImportError:
        return
    # Two logical CPU devices for MirroredStrategy tests, and no GPU in this process (the
    # gpu tests run TensorFlow in subprocesses); must precede TensorFlow's start-up, which
    # any test (tfds, a Keras build) may trigger first.
    tf.config.set_visible_devices([], "GPU")
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    _register_tf_trainers()


# Every time limit in the suite is a safety net at least 10x above the work it waits for on
# the reference machine (a 2-core AMD EPYC with AVX-512, alone), stretched by SLOWEST for the
# slowest machine the README promises: a 2-core CPU 3x slower, its cores shared with the
# other pytest -n 2 worker (2x). Nothing is measured, so no test's outcome follows this
# machine's speed or load; what a limit proves is tested by work made to overrun it.
SLOWEST = 6.0


def battery_plan(*args: str) -> dict:
    """`benchmarks/gpu_battery.py --plan ARGS` as the JSON it prints."""
    import contextlib
    import json

    from benchmarks import gpu_battery
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert gpu_battery.main(["--plan", *args]) == 0
    return json.loads(printed.getvalue())


def patience(seconds: float) -> float:
    """A safety-net limit of `seconds` on the reference machine, for any machine the suite
    promises to pass on."""
    return seconds * SLOWEST


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own $CNNCOMPARE_HOME: no test reads a real cache."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("CNNCOMPARE_HOME", str(home))
    return home


@pytest.fixture
def cifar_batches():
    return make_cifar_arrays()


@pytest.fixture
def cifar_archive(tmp_path, cifar_batches) -> Path:
    return write_cifar_archive(tmp_path, cifar_batches)


@pytest.fixture
def image_folder(tmp_path) -> Path:
    """train/ and test/ with 3 classes of PNG and JPEG images, 32x32 RGB."""
    rng = np.random.default_rng(1)
    root = tmp_path / "images"
    for split, count in (("train", 6), ("test", 2)):
        for cls in ("cat", "dog", "ship"):
            for i in range(count):
                image = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
                fmt = "PNG" if i % 2 == 0 else "JPEG"
                write_image(root / split / cls / f"{i}.{fmt.lower()}", image, fmt)
    return root


def tiny_config(tmp_path: Path, **changes) -> RunConfig:
    """A fast run on the CPU (also on a GPU host): tiny synthetic data, float32, no workers,
    one step per call (so windows fall on single steps; tests of step batching set
    steps_per_call themselves, and the CLI tests run the default), no phase profile (tests
    of --profile set profile_steps). Its precision is resolved, as a command resolves it
    before any framework starts (compare.machine.precision_choice.carry)."""
    from compare.machine import precision_choice
    fields = dict(dataset="synthetic", synthetic_train_size=256, synthetic_test_size=64, epochs=1,
                  batch_size=32, precision="fp32", quiet=True, out=str(tmp_path / "run"),
                  device="cpu", steps_per_call=1, profile_steps=0,
                  pipeline=PipelineConfig(workers=0, persistent_workers=False))
    fields.update(changes)
    return precision_choice.carry(RunConfig(**fields))


@pytest.fixture(scope="session")
def tf_two_cpus():
    """tf_impl.train, with TensorFlow split into 2 logical CPU devices (done above)."""
    if tf is None:
        pytest.skip("TensorFlow is not installed here")
    from tf_impl import train as tf_train
    assert len(tf.config.list_logical_devices("CPU")) == 2
    return tf_train


@pytest.fixture(params=["tf", "torch"])
def framework(request):
    """(name, train module); TensorFlow's split into 2 logical CPUs, its global dtype policy
    set back to float32 after the test."""
    if request.param == "torch":
        from torch_impl import train as torch_train
        yield "torch", torch_train
        return
    tf_train = request.getfixturevalue("tf_two_cpus")
    try:
        yield "tf", tf_train
    finally:
        import keras
        keras.mixed_precision.set_global_policy("float32")


def trainer_for(module, config: RunConfig):
    """A framework's Trainer (module: tf_impl.train or torch_impl.train) for `config`, its
    precision resolved where it has none, as a framework process's entry does."""
    from compare.experiment import datasets
    from compare.run.worker import carried_precision
    config = carried_precision(config)
    return module.Trainer(config, datasets.config_dataset(config), module.select_device(config))


def _torch_cuda() -> bool:
    """Whether PyTorch (imported above, if installed) sees a CUDA GPU."""
    return torch is not None and torch.cuda.is_available()


@pytest.fixture(scope="session")
def _fork_server_pool():
    """The fork servers (compare.process.warm) of this test process, started at their first
    use and ended with the session; lent to the modules that ask (forked_frameworks)."""
    from compare.process import warm
    pool = warm.Pool()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def forked_frameworks(_fork_server_pool):
    """Framework processes forked from fork servers (compare.process.warm) for the module's
    tests, as compare and sweep start theirs: the modules of many short framework calls
    (ports, their refusals) pay each framework's import once per test process instead of
    once a call, or once a module (10-20 s of a 2-core machine's quick tier). Between those
    modules no pool is active: every other test starts its processes as it would alone. Each
    child is a fresh process (tests/test_warm.py), its environment its server's (the first
    caller's: an isolated home no port reads). The plain process each call falls back to is
    tested in tests/test_warm.py and by every other test."""
    from compare.process import warm
    if os.environ.get(warm.DISABLE_ENV) == "0":
        yield None
        return
    with pytest.MonkeyPatch.context() as lent:
        lent.setattr(warm, "_active", _fork_server_pool)
        yield _fork_server_pool


@pytest.fixture(scope="module")
def torch_gpu():
    """torch_impl.train where PyTorch sees a CUDA GPU (the gpu tests); else the test skips."""
    if not _torch_cuda():
        pytest.skip("PyTorch sees no CUDA GPU here")
    from torch_impl import train as torch_train
    return torch_train


@pytest.fixture(scope="module")
def tf_gpus() -> list[dict]:
    """The GPUs TensorFlow sees, asked in its own process (the gpu tests); none: it skips."""
    from compare.process import runner
    env = runner.framework_environment("tf")
    if "error" in env or not env.get("gpus"):
        pytest.skip(f"TensorFlow sees no GPU here ({env.get('error') or 'no GPU'})")
    return env["gpus"]


def _machine_has_gpu() -> bool:
    """A CUDA GPU that PyTorch or the NVIDIA driver (NVML) can see, as the tool counts them
    (CUDA_VISIBLE_DEVICES honoured). Called at collection, before any test hides the GPUs,
    so CUDA in this process starts with them visible for the gpu tests."""
    from compare.machine.devices import nvidia_gpus
    return _torch_cuda() or nvidia_gpus() > 0


def hides_gpus(node) -> bool:
    """Whether a test runs with the GPUs hidden: every test not marked gpu."""
    return node.get_closest_marker("gpu") is None


@pytest.fixture(autouse=True)
def gpus_only_for_gpu_tests(request, monkeypatch):
    """One mechanism keeps every non-gpu test on the CPU on any host: CUDA_VISIBLE_DEVICES
    is empty while it runs, so each process it starts (a CLI run, a framework's subprocess,
    a launcher's workers) sees no CUDA device in PyTorch, TensorFlow or the tool's NVML
    counts, and trains on the CPU as on a machine without a GPU. This process's own CUDA
    started at collection with the GPUs visible (the gpu tests use them); its in-process
    training asks for the CPU itself (tiny_config's device="cpu"). Proven in
    tests/test_session.py. A gpu test runs each framework in the interpreter the user's own
    commands run it in (RECORDED_INTERPRETERS), though its $CNNCOMPARE_HOME is its own."""
    if hides_gpus(request.node):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        return
    for name, python in RECORDED_INTERPRETERS.items():
        if not os.environ.get(name):
            monkeypatch.setenv(name, python)


def recorded_interpreters() -> dict[str, str]:
    """The interpreters `cnncompare setup gpu` recorded in the user's own $CNNCOMPARE_HOME
    (read before any test gets a home of its own), as the variables that would name them:
    on a GPU host, TensorFlow's environment with its CUDA libraries. None where the
    configuration cannot be read."""
    from compare.errors import UserError
    from compare.setup import config
    try:
        recorded = config.read().environments
    except UserError:
        return {}
    return {config.variable(framework): env.python for framework, env in recorded.items()}


RECORDED_INTERPRETERS = recorded_interpreters()


_tf_trainers: weakref.WeakSet = weakref.WeakSet()  # every tf_impl Trainer this process built


def _register_tf_trainers() -> None:
    """Record each TensorFlow Trainer as it is built, so that a test's own can be closed."""
    from tf_impl import train as tf_train
    built = tf_train.Trainer.__init__
    if getattr(built, "registers", False):
        return

    @functools.wraps(built)
    def init(self, *args, **kwargs):
        built(self, *args, **kwargs)
        _tf_trainers.add(self)
    init.registers = True
    tf_train.Trainer.__init__ = init


@pytest.fixture(autouse=True)
def close_the_tests_tf_trainers():
    """Close the TensorFlow trainers a test built, when it ends, as every command closes its
    own. Left open, a trainer (a Keras model holds reference cycles) waits for the garbage
    collector, and deleting an old tf.data iterator waits for its autotuning thread's next
    wake-up, up to a minute (TensorFlow's RootDataset::Iterator destructor): whichever later
    test the collection falls in stood still that long (10-60 s, in about a dozen tests of a
    `pytest -n 2` run). Closing releases the pipelines on a thread of their own, and the
    test's garbage (an iterator a traced step function or a test still holds among it) is
    collected there too, while it is young: cheaply, what the imports made being frozen
    (pytest_collection_finish)."""
    before = set(map(id, _tf_trainers))
    yield
    for trainer in list(_tf_trainers):
        if id(trainer) not in before:
            trainer.close()
    threading.Thread(target=gc.collect, name="test-garbage", daemon=True).start()


def pytest_collection_finish(session):
    """Keep what the imports made (about 625,000 objects with both frameworks) out of every
    garbage collection to come: a full one scanned them for 0.25-0.3 s, now for microseconds."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    """Close the trainers the tests left open in this process now, while the interpreter is
    whole. Left to its shutdown, a tf.data iterator's destructor waits for its worker threads,
    one of which may be inside the pipeline's numpy_function and cannot take the GIL of a
    finalising interpreter (py-spy: the main thread in RootDataset::Iterator::~Iterator):
    pytest printed its summary, then took over 3 minutes to exit."""
    for obj in gc.get_objects():
        name, module = type(obj).__name__, type(obj).__module__ or ""
        if name == "Trainer" and module.endswith("_impl.train"):
            if hasattr(obj, "train_batches"):  # not one whose building failed half-way
                obj.close()
        elif name in ("FlowingEpochs", "EpochBatches") and module == "compare.experiment.plan":
            obj.__dict__.pop("iterator", None)  # a tf.data iterator, or a DataLoader's
    gc.collect()


def pytest_addoption(parser):
    parser.addoption("--heavy", action="store_true", default=False,
                     help="Also run the heavy tier: the tests marked slow (whole comparisons, "
                          "big networks, every stage of the GPU battery). CI runs it.")


def runs_heavy_tier(config) -> bool:
    """Whether the tests marked slow run: asked for with --heavy, or chosen by the user's own
    -m expression or test ids (which select what runs themselves)."""
    return (config.getoption("--heavy") or bool(config.option.markexpr)
            or any("::" in arg for arg in config.args))


def pytest_report_header(config):
    if not runs_heavy_tier(config):
        return ("tier: quick (the tests marked slow are left out; pytest --heavy runs them "
                "too, as CI does)")
    return None


def pytest_collection_modifyitems(config, items):
    """The quick tier leaves the heavy tests out unless asked (runs_heavy_tier); `gpu` tests
    skip, with the reason, on a machine without a GPU."""
    if not runs_heavy_tier(config):
        heavy = [item for item in items if "slow" in item.keywords]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            items[:] = [item for item in items if "slow" not in item.keywords]
    if _machine_has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: neither PyTorch nor NVML sees one here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
