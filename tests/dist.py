"""`make dist`: build the sdist and the wheel, check them, and install each one as a user
would, into its own fresh virtual environment outside the checkout.

    .venv/bin/python tests/dist.py [--installer uv|pip]

1. ``python -m build`` makes the sdist, then the wheel from that sdist (so a file missing
   from the sdist is missing from the wheel too), into ``.build/dist/``;
2. ``twine check --strict`` passes on both;
3. each artefact goes into a new venv (made from the base interpreter of this Python) with
   its dependencies resolved from the package index by ``uv pip install --compile-bytecode``
   (default) or ``pip install``, never with ``--no-deps``: an undeclared dependency fails
   there. The venvs live in ``<tmp>/shared-brain-install-<uid>-<checkout hash>/{wheel,sdist}``,
   made afresh on every run, with the working directory outside the checkout;
4. ``.build/dist/installed.json`` names the version, the artefacts and the venvs for
   ``tests/test_installed.py``, and the seconds each step took.

Two runs in one checkout take turns, and a run waits while tests/test_installed.py uses
the venvs (``.build/dist.lock``: exclusive here, shared there).

``--alongside COMMAND...`` (``make test``) starts the test suite as soon as that lock is
held and builds while it runs: the suite's tests/test_installed.py waits for the lock, so
it uses only this run's venvs; the exit status is 1 if the build failed, else the
suite's.

Exit status 1, after one line naming the failed command and the end of its output, when
a step fails.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".build" / "dist"
MANIFEST = OUT / "installed.json"
LOCK = ROOT / ".build" / "dist.lock"  # held while the venvs are rebuilt or used
KINDS = ("wheel", "sdist")


class StepFailed(Exception):
    """A command failed; the message names it and ends with its last output lines."""


def install_root() -> Path:
    """The venvs' folder: per user (root and others never share it) and per checkout."""
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"shared-brain-install-{os.getuid()}-{checkout}"


def clean_env() -> dict[str, str]:
    """This environment minus what would point an install or a Python at the checkout."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # uv trusts the system's certificate store, as pip does (a proxy's CA is installed
    # there); UV_NATIVE_TLS is the name uv releases before --system-certs read.
    return {"UV_SYSTEM_CERTS": "1", "UV_NATIVE_TLS": "1"} | env


def run(command: list[str], cwd: Path) -> float:
    """Run a command, return its seconds; raise StepFailed with its output's tail."""
    began = time.monotonic()
    done = subprocess.run(
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise StepFailed(f"`{' '.join(command)}` exited {done.returncode}:\n{tail}")
    return time.monotonic() - began


def build() -> tuple[dict[str, Path], float]:
    """The sdist, then the wheel built from it, in a fresh OUT."""
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    build_env = ["--installer", "uv"]  # build's isolated environments, made by uv: faster
    seconds = run([sys.executable, "-m", "build", *build_env, "--outdir", str(OUT), "."], ROOT)
    artefacts = {"wheel": list(OUT.glob("*.whl")), "sdist": list(OUT.glob("*.tar.gz"))}
    for kind, found in artefacts.items():
        if len(found) != 1:
            raise StepFailed(f"python -m build left {len(found)} {kind} files in {OUT}")
    return {kind: found[0] for kind, found in artefacts.items()}, seconds


def install(kind: str, artefact: Path, base: Path, installer: str) -> tuple[Path, float]:
    """A fresh venv holding ``artefact`` and the dependencies it declares, nothing else."""
    venv = base / kind
    # The interpreter the project's venv was made from (CPython records it there).
    python = str(getattr(sys, "_base_executable", sys.executable))
    began = time.monotonic()
    if installer == "uv":
        uv = str(Path(sys.executable).with_name("uv"))
        run([uv, "venv", "--quiet", "--python", python, str(venv)], base)
        # --compile-bytecode: as pip does by default, so no first run pays for compiling.
        run([uv, "pip", "install", "--quiet", "--compile-bytecode", "--python",
             str(venv / "bin" / "python"), str(artefact)], base)  # fmt: skip
    else:
        run([python, "-m", "venv", str(venv)], base)
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(artefact)], base)
    return venv, time.monotonic() - began


def make_dist(installer: str) -> dict[str, Any]:
    """Build, check and install; the manifest for tests/test_installed.py."""
    MANIFEST.unlink(missing_ok=True)  # a failed run leaves no stale pointers behind
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    base = install_root()
    artefacts, built = build()
    print(f"dist: built {', '.join(p.name for p in artefacts.values())} in {built:.1f} s")
    checked = run([sys.executable, "-m", "twine", "check", "--strict",
                   *map(str, artefacts.values())], ROOT)  # fmt: skip
    print(f"dist: twine check --strict passed on both in {checked:.1f} s")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    base.chmod(0o755)  # as root, the embedded PostgreSQL runs as another user
    with ThreadPoolExecutor(len(KINDS)) as pool:
        jobs = {k: pool.submit(install, k, artefacts[k], base, installer) for k in KINDS}
        venvs = {kind: job.result() for kind, job in jobs.items()}
    for kind, (venv, seconds) in venvs.items():
        print(f"dist: installed the {kind} into {venv} with {installer} in {seconds:.1f} s")
    return {
        "version": version,
        "checkout": str(ROOT),
        "installer": installer,
        "seconds": {"build": round(built, 1), "twine": round(checked, 1)}
        | {f"install_{kind}": round(seconds, 1) for kind, (_, seconds) in venvs.items()},
        "installs": {
            kind: {"artefact": str(artefacts[kind]), "venv": str(venv)}
            for kind, (venv, _) in venvs.items()
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tests/dist.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--installer", choices=["uv", "pip"], default="uv")
    parser.add_argument(
        "--alongside", nargs=argparse.REMAINDER, default=[], metavar="COMMAND",
        help="start COMMAND (the test suite) once the venvs' lock is held, build and install "
        "while it runs, then wait for it; exit 1 if the build failed, else COMMAND's status",
    )  # fmt: skip
    args = parser.parse_args(argv)
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    alongside: subprocess.Popen[bytes] | None = None
    with LOCK.open("a") as lock:
        # Another make dist of this checkout, or tests/test_installed.py using the venvs
        # (shared lock), finish first.
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Started under the lock (which it does not inherit): its tests/test_installed.py
        # waits for this build, whenever it gets there.
        alongside = subprocess.Popen(args.alongside) if args.alongside else None
        try:
            manifest = make_dist(args.installer)
        except BaseException as exc:
            if alongside is not None and not isinstance(exc, StepFailed):
                alongside.terminate()  # interrupted or broken: the suite goes too
                alongside.wait()
            if not isinstance(exc, StepFailed):
                raise
            print(f"dist: error: {exc}", file=sys.stderr)
            failed = True
        else:
            MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n")
            failed = False
    status = alongside.wait() if alongside is not None else 0
    if failed:
        sys.exit(1)
    sys.exit(status)


if __name__ == "__main__":
    main()
