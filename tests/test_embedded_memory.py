"""The embedded cluster's shared memory: sized to the machine once, an operator's setting kept.

initdb leaves 128 MB of ``shared_buffers``, which at 100,000 memories holds neither the
HNSW index nor the table. A cluster without a setting of its own gets a quarter of the
memory (128 MB to 4 GB); one set with ALTER SYSTEM keeps its own across starts.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

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


def test_the_test_cluster_started_with_the_machine_sized_memory(pg_cluster: PgCluster) -> None:
    pg = pg_cluster.embedded_pg
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
