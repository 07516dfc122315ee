"""What users install is what the tests run: the sdist and the wheel, each installed into a
fresh venv outside the checkout by `make dist` (tests/dist.py), answer on every console
script, hold every file of the source folders and import from the install. The two installs
are shown to be the same product (files, console scripts, requirements, resolved versions),
so the wheel's alone answers --help and passes the smoke run (tests/smoke.py) against a
brain-server started from it.

The venvs come from `.build/dist/installed.json`; without it these tests fail, saying to
run `make test` (or `make dist` before pytest).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / ".build" / "dist" / "installed.json"
LOCK = ROOT / ".build" / "dist.lock"  # tests/dist.py rebuilds the venvs only under it
KINDS = ("wheel", "sdist")
SCRIPTS = ("brain-server", "brain-admin", "brain-mcp", "brain-eval", "brain-bench", "brain")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SMOKE_STEPS = ("whoami", "save", "search", "context", "ingest", "graph", "conflict", "mcp")


@dataclass(frozen=True)
class Install:
    kind: str
    venv: Path
    artefact: Path

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    @property
    def site_packages(self) -> Path:
        found = list(self.venv.glob("lib/python3*/site-packages"))
        assert len(found) == 1, f"site-packages of {self.venv}: {found}"
        return found[0]


@pytest.fixture(scope="module", autouse=True)
def venvs_kept() -> Iterator[None]:
    """Hold off a `make dist` of this checkout (which remakes the venvs) while they are used."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield


def installed(kind: str) -> Install:
    """The venv `make dist` made for one artefact; a clear failure when there is none."""
    remedy = "run `make test` (or `make dist` before pytest) to build and install them"
    if not MANIFEST.exists():
        pytest.fail(f"no installed sdist and wheel ({MANIFEST} is missing): {remedy}")
    manifest = json.loads(MANIFEST.read_text())
    entry = manifest["installs"][kind]
    install = Install(kind, Path(entry["venv"]), Path(entry["artefact"]))
    if manifest["checkout"] != str(ROOT) or not install.bin("python").exists():
        pytest.fail(f"{MANIFEST} names venvs of another checkout or gone ones: {remedy}")
    return install


def user_env() -> dict[str, str]:
    """A user's environment: nothing that points Python at the checkout, no BRAIN_ settings
    of the test session (so brain-server runs its default number of workers)."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("BRAIN_")}


def run(install: Install, *command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(install.bin(command[0])), *command[1:]], cwd=cwd, env=user_env(),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_console_script_answers_its_version(kind: str, script: str, tmp_path: Path) -> None:
    """--version prints `<script> <version>`: the install's launcher reaches its code."""
    install = installed(kind)
    version = run(install, script, "--version", cwd=tmp_path)
    assert (version.returncode, version.stdout) == (0, f"{script} {VERSION}\n"), version.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_answers_help_and_bad_flags(script: str, tmp_path: Path) -> None:
    """--help prints the usage, and an unknown flag one error line with exit 2, never a
    traceback (from the wheel's install; the sdist's holds the same files,
    test_the_sdist_installs_what_the_wheel_installs)."""
    install = installed("wheel")
    helped = run(install, script, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: {script} ") and "--version" in helped.stdout
    bad = run(install, script, "--no-such-flag", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert len(bad.stderr.splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith(f"{script}: error: ") and f"{script} --help" in bad.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_the_installed_code_is_imported_not_the_checkout(kind: str, tmp_path: Path) -> None:
    """The venv's Python imports every brain package from its own site-packages and reads
    the version from the installed metadata."""
    install = installed(kind)
    code = (
        "import brain.authz, brain.clients, brain.server, brain.v1\n"
        "print(brain.authz.package_version())\n"
        "for m in (brain.authz, brain.clients, brain.server, brain.v1): print(m.__file__)"
    )
    done = subprocess.run(
        [str(install.bin("python")), "-c", code], cwd=tmp_path, env=user_env(),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    version, *files = done.stdout.split()
    assert version == VERSION
    assert len(files) == 4
    for file in map(Path, files):
        assert file.is_relative_to(install.site_packages / "brain"), file
        assert not file.resolve().is_relative_to(ROOT), file


def source_files() -> dict[Path, Path]:
    """Every file of the mapped source folders -> where it belongs under site-packages
    (a file goes with the deepest folder mapped, so clients/v1 is brain/v1)."""
    folders = PYPROJECT["tool"]["setuptools"]["package-dir"]
    by_depth = sorted(folders.items(), key=lambda item: -len(Path(item[1]).parts))
    found: dict[Path, Path] = {}
    for name, folder in by_depth:
        for path in sorted((ROOT / folder).rglob("*")):
            skipped = "__pycache__" in path.parts or path.name.startswith(".")
            if path.is_file() and not skipped and path not in found:
                found[path] = Path(*name.split(".")) / path.relative_to(ROOT / folder)
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_the_install_holds_every_file_of_the_source_folders(kind: str) -> None:
    """Every module and data file under authz/, server/ and clients/ is installed, byte for
    byte (a missing package or data file, or venvs older than the checkout, fail here)."""
    install = installed(kind)
    files = source_files()
    assert ROOT / "server" / "storage" / "migrations" / "0001_foundation.sql" in files  # control
    missing = [str(rel) for rel in files.values() if not (install.site_packages / rel).is_file()]
    assert missing == [], f"not in the installed {kind}: {missing}"
    stale = [
        str(src.relative_to(ROOT))
        for src, rel in files.items()
        if src.read_bytes() != (install.site_packages / rel).read_bytes()
    ]
    assert stale == [], f"the installed {kind} differs from the checkout (run `make dist`): {stale}"


def dist_info(install: Install) -> tuple[Path, dict[str, str]]:
    """The install's shared-brain dist-info folder, and every installed distribution's
    normalised name -> version (what the dependencies resolved to)."""
    site = install.site_packages
    versions: dict[str, str] = {}
    ours: list[Path] = []
    for folder in sorted(site.glob("*.dist-info")):
        name, _, version = folder.name.removesuffix(".dist-info").rpartition("-")
        versions[name.lower().replace("-", "_")] = version
        if name.lower().replace("-", "_") == "shared_brain":
            ours.append(folder)
    assert len(ours) == 1, f"shared-brain's dist-info in {site}: {ours}"
    return ours[0], versions


def test_the_sdist_installs_what_the_wheel_installs() -> None:
    """Built from the sdist or installed from the wheel, a user gets the same product: the
    same files under brain/ byte for byte (the checkout's, by the test above), the same
    console scripts and declared requirements, and the same versions of every dependency.
    So the wheel's install alone answers --help and runs the smoke run."""
    wheel, sdist = installed("wheel"), installed("sdist")

    def tree(install: Install) -> dict[str, bytes]:
        root = install.site_packages / "brain"
        return {
            path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }

    wheel_tree, sdist_tree = tree(wheel), tree(sdist)
    assert "server/runtime/main.py" in wheel_tree  # control: the tree is read
    assert sorted(wheel_tree) == sorted(sdist_tree)
    assert [f for f in wheel_tree if wheel_tree[f] != sdist_tree[f]] == []
    (wheel_info, wheel_versions), (sdist_info, sdist_versions) = dist_info(wheel), dist_info(sdist)
    for name in ("entry_points.txt",):
        assert (wheel_info / name).read_text() == (sdist_info / name).read_text(), name

    def requirements(info: Path) -> list[str]:
        lines = (info / "METADATA").read_text().splitlines()
        return sorted(line for line in lines if line.startswith("Requires-Dist:"))

    assert requirements(wheel_info) and requirements(wheel_info) == requirements(sdist_info)
    assert wheel_versions == sdist_versions


# -- a brain-server from the install, and the smoke run against it --------------------------


@dataclass(frozen=True)
class InstalledServer:
    install: Install
    target: str
    key_file: Path
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(target: str, proc: subprocess.Popen[bytes], log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"brain-server exited:\n{log.read_text()[-3000:]}"
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if status.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.1)
    raise AssertionError(f"brain-server not SERVING after {seconds} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def installed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledServer]:
    """brain-server of the wheel's install as a user starts it: embedded PostgreSQL, the
    default number of workers and embedder, a dev key in a file."""
    install = installed("wheel")
    folder = tmp_path_factory.mktemp(f"installed-{install.kind}")
    folder.chmod(0o755)  # as root, the embedded PostgreSQL runs as another user
    target, key_file, log = f"127.0.0.1:{free_port()}", folder / "dev-key", folder / "server.log"
    env = user_env() | {"BRAIN_DATA_DIR": str(folder / "data"), "BRAIN_DEV_KEY_FILE": str(key_file)}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(install.bin("brain-server")), "--listen", target],
            cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_serving(target, proc, log, seconds=60)
        yield InstalledServer(install, target, key_file, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_smoke_run_passes_against_a_server_from_the_install(
    installed_server: InstalledServer, tmp_path: Path
) -> None:
    """tests/smoke.py, run by the install's Python against the install's brain-server, passes
    every step (save, search, context, ingest, graph, mcp) using the install's brain."""
    install = installed_server.install
    command = [
        str(install.bin("python")), str(ROOT / "tests" / "smoke.py"),
        "--target", installed_server.target, "--key-file", str(installed_server.key_file),
        "--bin-dir", str(install.bin("")),
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=90,
        check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    lines = done.stdout.splitlines()
    assert lines[0] == f"smoke: brain {VERSION} from {install.site_packages / 'brain'}", said
    assert [line.split(":")[1].split()[-1] for line in lines[1:-1]] == list(SMOKE_STEPS), said
