"""A framework's fork server: `python -m compare.run.fork_server PRELOAD[,MODULE...] FD`.

Importing TensorFlow or PyTorch takes seconds (4-11 s each on a 2-core CPU) and a comparison
starts about ten framework processes. This process pays the import once: it imports PRELOAD
(the framework's train module, and modules every run imports later), touches no device and
runs no framework op, then forks one child per request that arrives on the socket FD
(compare.process.warm sends them). Each
child is a new process in everything a run can see: its own device initialisation, thread
pools, allocator, tf.function traces, oneDNN and cuDNN caches, random generators; only the
imported modules come from the server. It runs `python -m MODULE ARGS` (runpy), writing to
the pipe that came with the request, as a process the command started itself would.

One child at a time. For each request the server reports the child's pid, then its exit
status as os.waitpid gives it (a negative signal number for a killed child, as Popen). A
stop signal (SIGINT, SIGTERM, SIGHUP) is passed on to the running child, and the server
ends once that child has. When the command's process is gone, the server ends at once (its
socket closes, or it notices while it waits) and its child learns it as from its parent.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import time
import traceback
from typing import Any

from compare.run import shutdown

READY = {"ready": True}  # sent once PRELOAD is imported
POLL_S = 0.05  # how often a waiting server looks at its child and its parent (s)


def main(argv: list[str]) -> None:
    preload, fd = argv[0], int(argv[1])
    control = socket.socket(fileno=fd)
    parent = os.getppid()
    state: dict = {"child": None, "stop": None}
    handlers = {s: signal.getsignal(s) for s in shutdown.STOP_SIGNALS}

    def on_stop(signum: int, frame: Any) -> None:
        state["stop"] = state["stop"] or signum
        if state["child"] is not None:
            try:
                os.kill(state["child"], signum)
            except ProcessLookupError:
                pass
        if state["child"] is None or os.getppid() != parent:  # nothing to wait for / nobody
            os._exit(128 + signum)

    for signum, handler in handlers.items():
        if handler is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored, in the children too
            signal.signal(signum, on_stop)
    for module in preload.split(","):  # the seconds this process exists to pay once
        importlib.import_module(module)
    # Its children's collectors leave the imported objects alone (compare.run.worker freezes
    # them again with the run's module): no collection in a child writes to a page shared
    # with this process, so the heap stays shared rather than copied page by page
    gc.freeze()
    _send(control, READY)
    while state["stop"] is None:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            break
        if not message:  # the command closed its end: no more runs
            break
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            control.close()
            _child(request, fds[0], handlers)
        os.close(fds[0])
        state["child"] = pid
        _send(control, {"pid": pid})
        status = _wait(pid, parent)
        state["child"] = None
        _send(control, {"exit": os.waitstatus_to_exitcode(status)})
    os._exit(0)


def _wait(pid: int, parent: int) -> int:
    """The child's wait status. Should the command's process end meanwhile, the server ends
    too, and the child learns it as from its own parent (its parent-death signal, which
    compare.run.shutdown asked for). Polled: Linux's parent-death signal for the server
    itself would follow the thread of the command that started it, not the process."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if os.getppid() != parent:
            os._exit(128 + signal.SIGTERM)
        time.sleep(POLL_S)


def _send(control: socket.socket, message: dict) -> None:
    try:
        control.send(json.dumps(message).encode())
    except OSError:  # the command is gone; its stop reaches us as a signal
        pass


def _child(request: dict, out: int, handlers: dict) -> None:
    """In the forked child: the run's output on `out`, the signals a new Python process
    has, this server as its parent, then `python -m MODULE ARGS`; never returns."""
    code = 1
    try:
        for signum, handler in handlers.items():
            if handler is not signal.SIG_IGN:
                signal.signal(signum, handler)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ[shutdown.PARENT_PID_ENV] = str(os.getppid())
        sys.argv = [request["module"], *request["args"]]
        sys.modules.pop(request["module"], None)  # as under `python -m`: __main__ alone
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would print it
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
