"""How many CPUs this process may use: the default of ``brain-server --workers``.

``os.cpu_count()`` counts the machine's cores, not this process's: under ``taskset`` or a
cpuset the affinity mask is smaller, and in a container with a CPU limit (Kubernetes
``resources.limits.cpu``) the cgroup's quota is. One worker per core of the node there
would start far more processes (about 300 MB each) than the limit lets run.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The CPUs this process may run on (its affinity), bounded by its cgroup CPU quota; ≥ 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root, _read(proc_cgroup) or "")
    if limit is not None:
        count = min(count, limit)
    return max(1, count)


def cgroup_cpu_limit(root: Path, self_cgroup: str) -> int | None:
    """The CPU quota of the cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``) that ``self_cgroup`` (the text of /proc/self/cgroup) names,
    rounded up to whole CPUs, the smallest along its ancestors; None: no quota."""
    limits: list[int] = []
    for line in self_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2, the unified hierarchy
            for folder in _folders(root, path):
                limits += _v2_limit(folder)
        elif "cpu" in controllers.split(","):  # v1, the cpu controller's hierarchy
            for mount in (root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"):
                for folder in _folders(mount, path):
                    limits += _v1_limit(folder)
    return min(limits) if limits else None


def _folders(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder and its ancestors up to the mount. In a container without its
    own cgroup namespace the path is the host's and the mount is the container's own
    cgroup; the mount itself is read then."""
    folders = [mount]
    current = mount
    for part in [p for p in path.strip().split("/") if p]:
        current = current / part
        folders.append(current)
    return folders


def _v2_limit(folder: Path) -> list[int]:
    text = _read(folder / "cpu.max")
    if text is None:
        return []
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return []
    return _ratio(fields[0], fields[1])


def _v1_limit(folder: Path) -> list[int]:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None:
        return []
    return _ratio(quota.strip(), period.strip())


def _ratio(quota: str, period: str) -> list[int]:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return []
    if q <= 0 or p <= 0:  # v1 writes -1 for no quota
        return []
    return [max(1, math.ceil(q / p))]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
