"""What Linux says about a running process (``/proc/<pid>``): its resident memory and its CPU time."""

from __future__ import annotations

import os

TICK = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident set size in MiB (``VmRSS``); 0.0 once the process has gone."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time in seconds (``utime + stime`` of ``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK
