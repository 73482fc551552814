"""Memory protection: refuse new requests (retryably) before the process can be killed (issue: limits).

The limit defaults to 80 % of the container's cgroup memory limit when there is one, leaving room for
requests in flight; ``limits.memory_mib: 0`` disables the guard.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE")
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def cgroup_limit_bytes() -> int | None:
    """The container memory limit, or None when there is none (or it is effectively unlimited)."""
    for path in _CGROUP_FILES:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            return int(text)
    return None


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


class MemoryGuard:
    """Tracks resident memory against a limit; :meth:`check` runs periodically, not per request."""

    def __init__(self, limit_mib: float | None) -> None:
        self.limit_mib = limit_mib
        self._over = False

    @property
    def limit_bytes(self) -> int:
        if self.limit_mib is None:
            cg = cgroup_limit_bytes()
            return int(cg * 0.8) if cg else 0
        return int(self.limit_mib * (1 << 20))

    def check(self) -> None:
        limit = self.limit_bytes
        over = bool(limit) and rss_bytes() > limit
        if over != self._over:
            self._over = over
            if over:
                log.warning("resident memory above limits.memory_mib (%d MiB): refusing new requests with "
                            "retryable errors until it drops; lower state.max_sessions or raise the limit",
                            limit >> 20)
            else:
                log.info("memory back under the limit: accepting requests again")

    def overloaded(self) -> str | None:
        return "memory limit reached; retry later" if self._over else None
