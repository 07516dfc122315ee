"""What an operator meets at start and on errors: the pepper a database URL needs, the
default number of workers, one JSON object per log line, and brain-admin's one-line errors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from brain.server.runtime.cpus import cgroup_cpu_limit, usable_cpus
from brain.server.runtime.pepper import PepperError, load_pepper
from brain.server.telemetry import logs

from .conftest import PgCluster
from .zygote import run_module

SERVER = [sys.executable, "-m", "brain.server.runtime.main"]


def without(*names: str, **extra: str) -> dict[str, str]:
    """This process's environment without ``names`` (and with ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(extra)
    return env


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_a_database_url_without_a_pepper_file_is_refused_by_server_and_admin(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    """brain-server and brain-admin keys create with a database URL and no pepper file exit 2
    with one line naming --pepper-file and BRAIN_PEPPER_FILE, even when the data dir holds a
    (dev) pepper they could silently have used."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "pepper").write_bytes(os.urandom(32))  # the dev pepper `make run` leaves behind
    env = without(
        "BRAIN_PEPPER_FILE", BRAIN_DATA_DIR=str(data), BRAIN_EMBEDDER="none", BRAIN_WORKERS="1"
    )
    server = subprocess.run(
        [*SERVER, "--database-url", pg_cluster.app_dsn, "--listen", "127.0.0.1:0"],
        env=env, capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    admin = run_module(
        "brain.server.admin.main", "--database-url", pg_cluster.owner_dsn,
        "keys", "create", "--tenant", "nobody", "--principal", "p", env=env,
    )  # fmt: skip
    for done, prog in ((server, "brain-server"), (admin, "brain-admin")):
        assert done.returncode == 2, done.stderr
        (line,) = error_lines(done.stderr)
        if prog == "brain-server":  # a log line (JSON by default), so pipelines keep it
            line = json.loads(line)["event"]
        assert line.startswith(f"{prog}: error:"), line
        assert "--pepper-file" in line and "BRAIN_PEPPER_FILE" in line, line


def test_the_pepper_file_is_logged_by_path_and_a_readable_one_is_warned_about(
    tmp_path: Path,
) -> None:
    """Loading the pepper logs its path (never its bytes); a file readable by group or others
    is loaded with a warning naming it; a 0600 file raises no warning."""
    before = structlog.get_config()  # another test may have configured a higher level
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        pepper_logs(tmp_path)
    finally:
        structlog.configure(**before)


def pepper_logs(tmp_path: Path) -> None:
    pepper = tmp_path / "pepper"
    pepper.write_bytes(b"p" * 32)
    pepper.chmod(0o644)
    with structlog.testing.capture_logs() as events:
        assert load_pepper(pepper, tmp_path, database_url="postgresql://x/y") == b"p" * 32
    warned = [e for e in events if e["log_level"] == "warning"]
    assert [e["pepper_file"] for e in warned] == [str(pepper)]
    assert any(e.get("pepper_file") == str(pepper) for e in events if e["log_level"] == "info")
    assert "p" * 32 not in repr(events)
    pepper.chmod(0o600)
    with structlog.testing.capture_logs() as events:
        load_pepper(pepper, tmp_path, database_url="postgresql://x/y")
    assert [e for e in events if e["log_level"] == "warning"] == []
    with pytest.raises(PepperError, match="BRAIN_PEPPER_FILE"):
        load_pepper(None, tmp_path, database_url="postgresql://x/y")


def test_default_workers_follow_the_cpu_affinity() -> None:
    """brain-server's default --workers is the CPUs the process may run on: one under an
    affinity of one CPU (taskset -c 0), however many cores the machine has."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to tell affinity from the machine's cores")
    code = (
        "import argparse, os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from brain.server.runtime.config import add_server_arguments\n"
        "parser = argparse.ArgumentParser()\n"
        "add_server_arguments(parser)\n"
        "print(parser.parse_args([]).workers)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=without("BRAIN_WORKERS"),
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "1", done.stderr


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_cpu_quotas_bound_the_cpus_rounded_up(tmp_path: Path) -> None:
    """cgroup v2 cpu.max and v1 cfs quota/period give whole CPUs rounded up, the smallest
    along the cgroup's ancestors; "max" and -1 are no limit; the result bounds the affinity."""
    v2 = tmp_path / "v2"
    write(v2 / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(v2, "0::/\n") is None
    write(v2 / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_limit(v2, "0::/\n") == 2
    write(v2 / "kubepods" / "pod1" / "cpu.max", "max 100000\n")
    write(v2 / "kubepods" / "cpu.max", "50000 100000\n")
    assert cgroup_cpu_limit(v2, "0::/kubepods/pod1\n") == 1
    v1 = tmp_path / "v1"
    write(v1 / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(v1 / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(v1, "2:cpu,cpuacct:/\n1:memory:/x\n") is None
    write(v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us", "250000\n")
    write(v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(v1, "2:cpu,cpuacct:/docker\n") == 3
    assert cgroup_cpu_limit(tmp_path / "none", "0::/\n") is None
    proc = tmp_path / "cgroup"
    write(proc, "0::/\n")
    write(v2 / "cpu.max", "100000 100000\n")
    assert usable_cpus(v2, proc) == 1
    write(v2 / "cpu.max", "max 100000\n")
    assert usable_cpus(v2, proc) == len(os.sched_getaffinity(0))


def test_a_stdlib_log_with_a_traceback_is_one_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With JSON logs, a library's warning through stdlib logging (asyncpg's pool, with
    exc_info) is written as one JSON object on one line, its traceback in a field. It
    carries no request's identity: the pool warns from tasks that copied the context of an
    ended call, whose request it named; our own line in that context does (control)."""
    logs.configure("info", "json")
    bound = structlog.contextvars.bind_contextvars(request_id="r-ended", method="/x/Y")
    try:
        try:
            raise ConnectionResetError("connection lost")
        except ConnectionResetError:
            logging.getLogger("asyncpg.pool").warning(
                "Failed to restore the pool connection floor; retrying", exc_info=True
            )
        structlog.get_logger("brain.test").warning("ours")
        lines = capsys.readouterr().err.splitlines()
    finally:
        structlog.contextvars.reset_contextvars(**bound)
        logs.configure("warning")  # as the session's servers log
    line, ours = lines
    event = json.loads(line)
    assert event["event"] == "Failed to restore the pool connection floor; retrying"
    assert event["level"] == "warning" and event["logger"] == "asyncpg.pool"
    assert "ConnectionResetError: connection lost" in event["exception"]
    assert "request_id" not in event and "method" not in event
    assert json.loads(ours)["request_id"] == "r-ended"


def test_brain_admin_database_errors_are_one_line(pg_cluster: PgCluster) -> None:
    """brain-admin run as the server's role, or with a URL that is not PostgreSQL's, exits 2
    with one line (no traceback) naming what was wrong and the flag or variable used."""
    env = without("BRAIN_DATABASE_URL", "BRAIN_ADMIN_DATABASE_URL")
    as_app = run_module(
        "brain.server.admin.main", "--database-url", pg_cluster.app_dsn,
        "--pepper-file", str(pg_cluster.pepper_file), "tenants", "create", "nobody-app", env=env,
    )  # fmt: skip
    flag = run_module("brain.server.admin.main", "--database-url", "mysql://x", "migrate", env=env)
    variable = run_module(
        "brain.server.admin.main", "migrate", env={**env, "BRAIN_ADMIN_DATABASE_URL": "mysql://x"}
    )
    for done, needle in (
        (as_app, "permission denied"),
        (flag, "--database-url 'mysql://x' is not a postgresql:// URL"),
        (variable, "BRAIN_ADMIN_DATABASE_URL 'mysql://x' is not a postgresql:// URL"),
    ):
        assert done.returncode == 2, done.stderr
        (line,) = error_lines(done.stderr)
        assert line.startswith("brain-admin: error:") and needle in line, line


def test_a_password_is_never_echoed_whatever_form_the_database_url_takes() -> None:
    """A password in the URL's user part, in its query (libpq takes ``?password=``) or in
    a key=value connection string is replaced in what logs and errors show; the rest of
    the URL stays readable (control). brain-admin's error for each form holds no secret."""
    cases = {
        "postgresql://u:S3CRET@127.0.0.1:1/x": "postgresql://u:***@127.0.0.1:1/x",
        "postgresql://u@/brain?host=/tmp/pg&password=S3CRET": (
            "postgresql://u@/brain?host=/tmp/pg&password=***"
        ),
        "postgres://u@h/db?sslmode=require&sslpassword=S3CRET": (
            "postgres://u@h/db?sslmode=require&sslpassword=***"
        ),
        "host=/tmp/pg password=S3CRET dbname=x": "host=/tmp/pg password=*** dbname=x",
        "host=h password='S3 CRET' dbname=x": "host=h password=*** dbname=x",
        "postgresql://u@h/db": "postgresql://u@h/db",
    }
    for dsn, shown in cases.items():
        assert logs.redact_dsn(dsn) == shown
    env = without("BRAIN_DATABASE_URL", "BRAIN_ADMIN_DATABASE_URL")
    for dsn in ("postgresql://u@127.0.0.1:1/x?password=S3CRET", "host=h password=S3CRET"):
        done = run_module("brain.server.admin.main", "--database-url", dsn, "tenants", "list",
                          env=env)  # fmt: skip
        assert done.returncode == 2 and "S3CRET" not in done.stderr + done.stdout, done.stderr
        assert error_lines(done.stderr), done.stderr  # it did say why (control)


def test_brain_admin_output_cut_short_by_its_reader_is_no_database_error(
    pg_cluster: PgCluster,
) -> None:
    """`brain-admin ... | head` can close the pipe before brain-admin is done: it stops
    quietly (exit 1), never blaming the database ("cannot reach the database: Broken
    pipe"); the same listing through an open pipe works (control)."""
    args = ["--database-url", pg_cluster.owner_dsn, "tenants", "list", "--json"]
    env = {**without("BRAIN_DATABASE_URL", "BRAIN_ADMIN_DATABASE_URL"), "PYTHONUNBUFFERED": "1"}
    whole = run_module("brain.server.admin.main", *args, env=env)
    assert whole.returncode == 0 and whole.stdout, whole.stderr
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)  # gone before any line
    reader.wait(timeout=10)
    assert reader.stdin is not None
    try:
        done = subprocess.run(
            [sys.executable, "-m", "brain.server.admin.main", *args], stdout=reader.stdin,
            stderr=subprocess.PIPE, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
    finally:
        reader.stdin.close()
    assert done.returncode == 1 and "database" not in done.stderr, done.stderr
