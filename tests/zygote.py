"""`python -m <module> args` for the tests' many short CLI runs, without paying for the
imports every time.

A brain-admin run spends about a second of CPU importing the server's packages before it
does anything; the suite runs it dozens of times. Here one helper process per test
process (the zygote) imports those packages once, and each run is a new process forked
from it that executes the module as ``python -m`` does (``runpy`` as ``__main__``, with
the run's argv, environment, working directory, stdin from /dev/null and its own stdout
and stderr). Each run is still a process of its own: its exit status, output, global
state and crashes are its own, as with ``subprocess.run``, and what it returns is a
``subprocess.CompletedProcess``.

What a fork cannot give is a module's import-time reading of the environment: a variable
some module reads at import (``IMPORT_TIME_ENV``) set to another value than the zygote's
makes the run an ordinary subprocess instead.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

# Imported once by the zygote: brain-admin's command modules cover most of the server.
PRELOAD = ("brain.server.admin.main",)
# Read by a module at import time (server/telemetry/metrics.py): not taken from a fork.
IMPORT_TIME_ENV = ("PROMETHEUS_MULTIPROC_DIR",)

ZYGOTE = r"""
import atexit, importlib, json, os, runpy, sys, traceback

control_in = os.fdopen(os.dup(0), "rb", buffering=0)
control_out = os.fdopen(os.dup(1), "wb")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)  # whatever an import prints stays out of the control pipe
for name in sys.argv[1:]:
    importlib.import_module(name)


def child(request):
    control_in.close()
    control_out.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_TRUNC), 1)
    os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_TRUNC), 2)
    sys.argv = [request["module"], *request["args"]]
    # As `python -m`: the module runs once, as __main__, not also under its own name.
    sys.modules.pop(request["module"], None)
    code = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


for line in iter(control_in.readline, b""):
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    control_out.write(b"%d\n" % pid)
    control_out.flush()
    _, status = os.waitpid(pid, 0)
    control_out.write(b"%d\n" % os.waitstatus_to_exitcode(status))
    control_out.flush()
"""


class Zygote:
    """One zygote process, started on first use; runs are taken one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._env = dict(os.environ)
            self._process = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE, *PRELOAD],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env, cwd="/",
                bufsize=0,  # unbuffered: select() sees every line the zygote wrote
            )  # fmt: skip
        return self._process

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait(10)

    def run_module(
        self,
        module: str,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """As ``subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
        text=True, timeout=timeout, check=False)``."""
        env = dict(os.environ if env is None else env)
        cwd = str(cwd if cwd is not None else Path.cwd())
        command = [sys.executable, "-m", module, *args]
        with self._lock:
            zygote = self._started()
            if any(env.get(name) != self._env.get(name) for name in IMPORT_TIME_ENV):
                return subprocess.run(
                    command, env=env, cwd=cwd, capture_output=True, text=True,
                    timeout=timeout, check=False,
                )  # fmt: skip
            with tempfile.TemporaryDirectory(prefix="brain-zygote-") as scratch:
                out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
                out.touch()
                err.touch()
                request = {"module": module, "args": list(args), "env": env, "cwd": cwd,
                           "stdout": str(out), "stderr": str(err)}  # fmt: skip
                returncode = self._exchange(zygote, request, timeout, command)
                return subprocess.CompletedProcess(
                    command, returncode, out.read_text(), err.read_text()
                )

    def _exchange(
        self, zygote: subprocess.Popen[bytes], request: dict[str, object], timeout: float,
        command: list[str],
    ) -> int:  # fmt: skip
        assert zygote.stdin is not None and zygote.stdout is not None
        data = memoryview(json.dumps(request).encode() + b"\n")
        while data:
            data = data[zygote.stdin.write(data) or 0 :]
        pid = int(_line(zygote.stdout, None))
        try:
            return int(_line(zygote.stdout, timeout))
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            _line(zygote.stdout, None)
            raise subprocess.TimeoutExpired(command, timeout) from None


def _line(stream: IO[bytes], timeout: float | None) -> bytes:
    """The zygote's next line (it writes nothing else), waiting at most ``timeout``."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise subprocess.TimeoutExpired("zygote", timeout or 0)
    line = stream.readline()
    if not line:
        raise RuntimeError("the test zygote process ended")
    return line


ZYGOTE_PROCESS = Zygote()
atexit.register(ZYGOTE_PROCESS.close)
run_module = ZYGOTE_PROCESS.run_module
