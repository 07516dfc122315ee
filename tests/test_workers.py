"""brain-server --workers: several processes answer on one port and all drain on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import grpc
import psutil
import pytest

from brain.v1 import identity_pb2, identity_pb2_grpc

from .conftest import PgCluster
from .test_server_process import SERVER, free_port, postgres_for, wait_serving


def cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # a helper that already exited
        return []


def spawned(parent: psutil.Process) -> list[psutil.Process]:
    return [p for p in parent.children() if "spawn_main" in " ".join(cmdline(p))]


def log_events(path: Path) -> list[dict[str, object]]:
    """The JSON log events in ``path``. Workers share the file, so two events can land on
    one line (or a line be mid-write while read): every whole object is read."""
    events = []
    decoder = json.JSONDecoder()
    for line in path.read_text().splitlines():
        at = line.find("{")
        while at != -1:
            try:
                event, end = decoder.raw_decode(line, at)
            except json.JSONDecodeError:
                break
            events.append(event)
            at = line.find("{", end)
    return events


def test_two_workers_both_answer_and_all_drain_on_sigterm(tmp_path: Path) -> None:
    """Calls over fresh connections reach both workers (each logs calls it answered); on
    SIGTERM every worker stops gracefully, the parent exits 0 and no process or PostgreSQL
    of the server remains."""
    os.chmod(tmp_path, 0o755)
    data, port, log = tmp_path / "data", free_port(), tmp_path / "server.log"
    env = {**os.environ, "BRAIN_DATA_DIR": str(data), "BRAIN_DEV_KEY_FILE": str(tmp_path / "key"),
           "BRAIN_EMBEDDER": "none", "BRAIN_WORKERS": "2"}  # fmt: skip
    env.pop("BRAIN_DATABASE_URL", None)
    with log.open("w") as stderr:
        proc = subprocess.Popen([*SERVER, "--listen", f"127.0.0.1:{port}"], env=env, stderr=stderr)
    try:
        wait_serving(f"127.0.0.1:{port}", proc)
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30  # the second worker is spawned after the first serves
        while len(workers := spawned(parent)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 2
        for _ in range(300):  # and answers once its own health says so (a log line)
            if {e.get("worker") for e in log_events(log) if e.get("event") == "serving"} == {0, 1}:
                break
            time.sleep(0.1)
        key = (tmp_path / "key").read_text().strip()
        for i in range(24):  # each channel its own connection, so the kernel spreads them
            options = [("grpc.use_local_subchannel_pool", 1), ("brain.test.connection", i)]
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
                me = identity_pb2_grpc.IdentityServiceStub(channel).WhoAmI(
                    identity_pb2.WhoAmIRequest(),
                    metadata=(("authorization", f"Bearer {key}"),),
                    timeout=10,
                )
                assert me.principal
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        events = log_events(log)
        answered = {e.get("worker") for e in events if e.get("event") == "rpc"}
        assert answered == {0, 1}  # both answered (WhoAmI and health checks)
        stopped = {e.get("worker") for e in events if e.get("event") == "server stopped"}
        assert stopped >= {0, 1}  # every worker went through the graceful stop
        assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
        assert postgres_for(data) == []
        assert key not in log.read_text()  # the parent logs the dev key's file, not the key
        assert [e.get("key_file") for e in events if e.get("tenant") == "local"] == [
            str(tmp_path / "key")
        ]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The samples of one /metrics scrape, by name and labels."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_two_workers_are_one_server_for_metrics_and_the_rate_limit(tmp_path: Path) -> None:
    """With 2 workers, one /metrics port counts every worker's calls, and a burst from many
    connections gets the key's burst from the whole server, not one per worker (before,
    worker 1's calls were on another port and each worker had its own bucket)."""
    import threading

    os.chmod(tmp_path, 0o755)
    data, port, log = tmp_path / "data", free_port(), tmp_path / "server.log"
    metrics_port, burst, rate = free_port(), 30, 0.5
    env = {**os.environ, "BRAIN_DATA_DIR": str(data), "BRAIN_DEV_KEY_FILE": str(tmp_path / "key"),
           "BRAIN_EMBEDDER": "none", "BRAIN_WORKERS": "2"}  # fmt: skip
    env.pop("BRAIN_DATABASE_URL", None)
    args = ["--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--rate-limit", str(rate), "--rate-burst", str(burst)]  # fmt: skip
    with log.open("w") as stderr:
        proc = subprocess.Popen([*SERVER, *args], env=env, stderr=stderr)
    try:
        wait_serving(f"127.0.0.1:{port}", proc)
        for _ in range(300):  # the second worker serves once its own start logs it
            if {e.get("worker") for e in log_events(log) if e.get("event") == "serving"} == {0, 1}:
                break
            time.sleep(0.1)
        # Every worker's serving line, and the parent's, names the /metrics address.
        started_lines = [
            e for e in log_events(log) if e.get("event") in ("serving", "workers started")
        ]
        assert {e.get("worker") for e in started_lines} == {0, 1, None}
        assert {e.get("metrics") for e in started_lines} == {f"127.0.0.1:{metrics_port}"}
        key = (tmp_path / "key").read_text().strip()
        codes: list[grpc.StatusCode] = []

        def caller(index: int) -> None:  # each thread its own connection
            options = [("grpc.use_local_subchannel_pool", 1), ("brain.test.connection", index)]
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
                stub = identity_pb2_grpc.IdentityServiceStub(channel)
                for _ in range(3):
                    try:
                        stub.WhoAmI(
                            identity_pb2.WhoAmIRequest(),
                            metadata=(("authorization", f"Bearer {key}"),),
                            timeout=15,
                        )
                        codes.append(grpc.StatusCode.OK)
                    except grpc.RpcError as exc:
                        codes.append(exc.code())

        started = time.monotonic()
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(30)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        allowed = codes.count(grpc.StatusCode.OK)
        refused = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert allowed + refused == len(codes) == 90
        answered = {
            e.get("worker")
            for e in log_events(log)
            if e.get("event") == "rpc" and "WhoAmI" in str(e.get("method"))
        }
        assert answered == {0, 1}  # the burst reached both workers
        # One bucket for the server: the burst plus what refilled while it ran (two
        # buckets would have let about 2 x 30 through).
        assert burst <= allowed <= burst + rate * elapsed + 1
        samples = scrape(metrics_port)
        method = "/brain.v1.IdentityService/WhoAmI"

        def calls(code: str) -> float:
            labels = frozenset({("method", method), ("code", code)})
            return samples.get(("brain_rpc_requests_total", labels), 0.0)

        assert calls("OK") == allowed  # every worker's calls on the one port
        assert calls("RESOURCE_EXHAUSTED") == refused
        assert samples[("brain_serving", frozenset())] == 1
        pools = {("pool", "primary"), ("state", "max")}
        assert samples[("brain_db_pool_connections", frozenset(pools))] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_killed_parent_takes_its_workers_with_it_and_logs_json_lines_only(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    """kill -9 of the parent as soon as it serves, the second worker maybe still starting:
    that one used to miss the death signal (asked for after the parent died) and serve on
    as an orphan holding the port. Every worker ends, and all the server's processes wrote
    to the shared stream are whole JSON lines: multiprocessing's resource tracker warned in
    plain text, and two workers' lines ran together ('{..}{..}')."""
    if not pg_cluster.app_dsn:
        pytest.skip("needs a database URL for the server process")
    env = {
        **os.environ, "BRAIN_DATABASE_URL": pg_cluster.app_dsn,
        "BRAIN_PEPPER_FILE": str(pg_cluster.pepper_file), "BRAIN_DATA_DIR": str(tmp_path),
        "BRAIN_EMBEDDER": "none", "BRAIN_WORKERS": "2",
    }  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [*SERVER, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_serving(f"127.0.0.1:{port}", proc)
        children = psutil.Process(proc.pid).children()
        assert len(children) >= 2  # the first worker and the resource tracker, at least
        proc.kill()
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], [" ".join(cmdline(p))[:120] for p in alive]
        assert proc.stderr is not None
        lines = proc.stderr.read().splitlines()
        assert lines, "the server logged nothing?"
        for line in lines:
            assert isinstance(json.loads(line), dict), line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_early_worker_ends_when_postgresql_does_not_start(tmp_path: Path) -> None:
    """The first worker is spawned before PostgreSQL starts (it imports the server
    meanwhile). When PostgreSQL cannot start, the parent says so in one line, exits 2,
    and the worker waiting for its settings ends with it; nothing is left running."""
    os.chmod(tmp_path, 0o755)
    pg = tmp_path / "data" / "pg"
    pg.mkdir(parents=True)
    (pg / "PG_VERSION").write_text("99\n")  # a cluster of a version that does not exist
    pg.chmod(0o700)
    env = {**os.environ, "BRAIN_DATA_DIR": str(tmp_path / "data"), "BRAIN_EMBEDDER": "none",
           "BRAIN_WORKERS": "2"}  # fmt: skip
    env.pop("BRAIN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [*SERVER, "--listen", f"127.0.0.1:{free_port()}"], env=env, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    parent = psutil.Process(proc.pid)
    early: list[psutil.Process] = []
    deadline = time.monotonic() + 30
    while proc.poll() is None and not early and time.monotonic() < deadline:
        early = spawned(parent)  # the early worker (positive control: it existed)
        time.sleep(0.05)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert early, "no worker was spawned before PostgreSQL started"
    _, alive = psutil.wait_procs(early, timeout=30)
    assert alive == []
    fatal = [json.loads(line) for line in stderr.splitlines() if '"critical"' in line]
    assert len(fatal) == 1 and "did not start" in str(fatal[0]["event"]), stderr
