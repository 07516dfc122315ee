"""telemetry-ingest: robot state from the TELEMETRY stream into ClickHouse.

Robots publish their state on MQTT several times a second; the site node's bridge
forwards it to the cloud, where it lands on the NATS JetStream subject
``telemetry.<site>.<robot>``. This service reads those messages with a durable pull
consumer named ``telemetry-ingest``, cleans them up and writes them to
``telemetry.robot_state`` in batches.

Batches are flushed when they hold 5,000 rows or when the oldest row has waited two
seconds, whichever comes first. Messages are acknowledged only after ClickHouse
accepted the batch, so a crash re-reads the unacknowledged messages; duplicates are
removed by ClickHouse's ReplacingMergeTree on (robot_id, seq).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

log = logging.getLogger("telemetry.ingest")

BATCH_ROWS = 5_000
BATCH_MAX_WAIT_S = 2.0

# Messages older than this when they arrive are written to robot_state_late instead
# of robot_state. They come from site nodes replaying their buffer after island mode,
# and mixing them into today's partitions makes merges far more expensive.
LATE_AFTER_S = 10 * 60

# rover-os reports battery as a float; values outside 0..100 come from a known
# firmware bug during cell balancing and are clamped rather than dropped.
BATTERY_MIN, BATTERY_MAX = 0.0, 100.0

# Poses are stored with millimetre precision; anything finer is sensor noise.
POSE_DECIMALS = 3

# Rows for robots we do not know (not in the fleet registry) are counted and dropped.
# A burst of them usually means a robot was moved between sites without updating
# the registry.
UNKNOWN_ROBOT_METRIC = "telemetry_unknown_robot_total"


@dataclass
class Row:
    robot_id: str
    site: str
    seq: int
    ts: float
    x: float
    y: float
    theta: float
    speed: float
    battery_pct: float
    state: str
    task_id: str | None
    map_version: str
    error_codes: list[str] = field(default_factory=list)


def parse(subject: str, payload: bytes, known_robots: set[str]) -> Row | None:
    """Turn one message into a row, or None when it must be skipped.

    The subject carries the site and robot; the payload is JSON as sent by rover-os.
    Messages without a ``seq`` are skipped: without it duplicates cannot be removed,
    and rover-os versions older than 7.2 that omit it are no longer in the fleet.
    """
    _, site, robot_id = subject.split(".", 2)
    if robot_id not in known_robots:
        log.debug("unknown robot %s at %s", robot_id, site)
        return None
    msg: dict[str, Any] = json.loads(payload)
    if "seq" not in msg:
        return None
    battery = min(BATTERY_MAX, max(BATTERY_MIN, float(msg["battery"])))
    return Row(
        robot_id=robot_id,
        site=site.upper(),
        seq=int(msg["seq"]),
        ts=float(msg["ts"]),
        x=round(float(msg["x"]), POSE_DECIMALS),
        y=round(float(msg["y"]), POSE_DECIMALS),
        theta=round(float(msg["theta"]), 4),
        speed=float(msg.get("v", 0.0)),
        battery_pct=battery,
        state=msg["state"],
        task_id=msg.get("task"),
        map_version=msg["map"],
        error_codes=list(msg.get("err", [])),
    )


class Batcher:
    """Collects rows and decides when to flush.

    ``late`` rows go to their own list and are flushed with the same rules, to
    ``telemetry.robot_state_late``, which has a TTL of seven days and is read only
    by the replay tools.
    """

    def __init__(self, now: float | None = None) -> None:
        self.rows: list[Row] = []
        self.late: list[Row] = []
        self.started = now if now is not None else time.monotonic()

    def add(self, row: Row, received_at: float) -> None:
        if received_at - row.ts > LATE_AFTER_S:
            self.late.append(row)
        else:
            self.rows.append(row)

    def due(self, now: float) -> bool:
        size = len(self.rows) + len(self.late)
        return size >= BATCH_ROWS or (size > 0 and now - self.started >= BATCH_MAX_WAIT_S)


def insert(client: Any, table: str, rows: Iterable[Row]) -> int:
    """Insert rows with one INSERT; returns the number written.

    Inserts use ``async_insert=0``: we batch ourselves, and ClickHouse's async
    inserts acknowledged rows before they were durable, which broke the guarantee
    that an acknowledged NATS message is stored.
    """
    data = [list(r.__dict__.values()) for r in rows]
    if not data:
        return 0
    client.insert(table, data, settings={"async_insert": 0, "insert_quorum": 2})
    return len(data)


def flush(client: Any, batch: Batcher, ack: Any) -> None:
    """Write a batch and acknowledge its messages only when both inserts succeeded.

    On a ClickHouse error the messages are not acknowledged and NATS redelivers them
    after the consumer's ack wait of 30 seconds. After five failed deliveries a
    message is sent to the ``telemetry.dead`` subject for inspection.
    """
    written = insert(client, "telemetry.robot_state", batch.rows)
    written += insert(client, "telemetry.robot_state_late", batch.late)
    ack()
    log.info("flushed %d rows (%d late)", written, len(batch.late))
