"""The persistent export queue: accepted requests kept in SQLite so they survive a crash or restart.

This module owns the on-disk queue (``exporter.persistent_dir``): its file format, its durability, its
bounds, recovery at start and what happens to a file that cannot be read.

Durability. The receivers answer a client only after :meth:`PersistentQueue.put` returns, and ``put``
returns only after its transaction has committed with ``journal_mode=WAL`` and ``synchronous=FULL``: SQLite
fsyncs the write-ahead log before the commit returns, so an acknowledged request survives a SIGKILL and a
power cut alike. (``NORMAL`` would survive a process crash but not the loss of the OS page cache.) One
fsync per request costs well under a millisecond on an SSD, which is why the insert stays on the request
path instead of a batching thread that would have to hold the client's answer back anyway.

Delivery is at-least-once, in order: a row is deleted only after the sender acknowledges its batch, so a
crash between delivery and deletion sends that batch again after the restart. The deletion itself commits
with ``synchronous=NORMAL``: it survives a process crash, and the next fsync of the log (the next ``put``
or checkpoint) makes it survive a power cut too; losing it would only mean sending the batch again, so it
is not worth a second fsync per request. Rows are read back in
insertion order (an AUTOINCREMENT key, never reused), which keeps every session's spans in order.

Threads. Every SQLite call runs on one thread of the queue's own, in the order the calls were made, so
a transaction is never interleaved with another and the event loop never waits on the disk: the
service uses the ``*_async`` methods, which free the loop while a request of many megabytes is written
(its parts in one transaction) or a delivered batch is deleted. The plain methods wait for the same
thread and suit callers without a loop.

Bounds. The queue holds at most ``capacity_spans`` spans and ``capacity_bytes`` bytes of requests, and, like
the in-memory queue, takes one request of any size when it is empty. The byte bound is checked at
admission against the size of the received request (:meth:`has_room`); what is actually stored is larger
by the findings and attributes added to it (a few per cent usually, several times for a request whose every
span gets findings), so the file can overshoot the bound by the enrichment of the requests in flight rather
than refuse a request that was already admitted. One client request may be stored as several rows (its
parts, each within ``exporter.max_request_mib``), written in one transaction.

Damage. A file that SQLite cannot open or that fails ``PRAGMA quick_check`` or has an unknown layout is
renamed to ``<name>.corrupt-<UTC timestamp>`` (with its ``-wal`` file), logged as an error naming both
paths, and replaced by an empty queue: one bad file must not stop otelloop from accepting new data.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, TypeVar

from otelloop.export.queue import Batch

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The queue database inside ``exporter.persistent_dir``.
FILE_NAME = "otelloop-queue.sqlite3"
#: Held with ``flock`` while a process uses the directory, so two processes never deliver one queue.
LOCK_NAME = "otelloop-queue.lock"
#: ``PRAGMA user_version`` of the layout this module writes.
SCHEMA_VERSION = 1

_SCHEMA = ("CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, spans INTEGER NOT NULL, "
           "nbytes INTEGER NOT NULL, data BLOB NOT NULL)")
#: When the queue drains and this much of the file is free pages, give it back to the file system.
_VACUUM_FREE_BYTES = 8 << 20
#: Storage errors are logged at most this often (seconds); a full disk would otherwise log per request.
_ERROR_LOG_INTERVAL = 10.0


class QueueLocked(OSError):
    """Another process holds the persistent queue directory (an OSError: the service reports it as a
    start-up failure, like a port in use)."""


class PersistentQueue:
    """A FIFO of serialized requests in a SQLite file, bounded by spans and bytes.

    Implements :class:`otelloop.export.queue.SpanQueue`, plus ``put_many_async``, ``peek_batch_async`` and
    ``ack_async``. Each call is one short transaction on the queue's own thread.

    Args:
        directory: where the queue file lives; created if missing.
        capacity_spans: most spans held (``exporter.queue_spans``).
        capacity_bytes: most request bytes held (``exporter.persistent_max_mib``).

    Raises:
        QueueLocked: another otelloop process uses ``directory``.
        OSError: the directory cannot be created or written.
    """

    def __init__(self, directory: str | Path, capacity_spans: int, capacity_bytes: int) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self._capacity_spans = capacity_spans
        self._capacity_bytes = capacity_bytes
        self._spans = 0
        self._bytes = 0
        self._rows = 0
        self._acked_through = 0  # rows up to this id are delivered even if their DELETE did not commit
        self._last_error = float("-inf")
        self._closed = False
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.directory / LOCK_NAME)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="otelloop-queue")
        try:
            self._db = self._run(self._open)
        except BaseException:
            self._worker.shutdown()
            self._lock.close()
            raise

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the queue's thread and wait for it."""
        return self._worker.submit(fn, *args).result()

    async def _run_async(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the queue's thread; the event loop is free meanwhile."""
        return await asyncio.wrap_future(self._worker.submit(fn, *args))

    # -- SpanQueue ----------------------------------------------------------------------------------

    @property
    def capacity_spans(self) -> int:
        return self._capacity_spans

    @property
    def capacity_bytes(self) -> int:
        return self._capacity_bytes

    @property
    def queued_spans(self) -> int:
        return self._spans

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    @property
    def queued_requests(self) -> int:
        return self._rows

    def has_room(self, spans: int, nbytes: int) -> bool:
        """Whether a request of ``spans`` spans and about ``nbytes`` bytes would be taken now."""
        if self._rows == 0:
            return True
        return (self._spans + spans <= self._capacity_spans
                and self._bytes + nbytes <= self._capacity_bytes)

    def put(self, data: bytes, spans: int) -> bool:
        """Append a request durably; True only once it is on stable storage.

        False when it does not fit or cannot be stored (disk full, I/O error): the client is then refused
        with a retryable error, which is the only safe answer when the data is not on disk.
        """
        return self.put_many(((data, spans),))

    def put_many(self, parts: Sequence[tuple[bytes, int]]) -> bool:
        """Append the parts of one client request in one transaction: all are stored, or none."""
        return self._run(self._put_many, parts)

    async def put_many_async(self, parts: Sequence[tuple[bytes, int]]) -> bool:
        return await self._run_async(self._put_many, parts)

    def _put_many(self, parts: Sequence[tuple[bytes, int]]) -> bool:
        spans = sum(n for _, n in parts)
        if self._rows and (self._spans + spans > self._capacity_spans or self._bytes >= self._capacity_bytes):
            return False
        try:
            with self._db:
                self._db.executemany("INSERT INTO requests (spans, nbytes, data) VALUES (?, ?, ?)",
                                     ((n, len(data), data) for data, n in parts))
        except sqlite3.Error as e:
            self._storage_failed("store a request", e)
            return False
        self._rows += len(parts)
        self._spans += spans
        self._bytes += sum(len(data) for data, _ in parts)
        return True

    def peek_batch(self, max_bytes: int) -> Batch | None:
        """Coalesces rows from the head while they fit in ``max_bytes``; the head always goes."""
        return self._run(self._peek_batch, max_bytes)

    async def peek_batch_async(self, max_bytes: int) -> Batch | None:
        return await self._run_async(self._peek_batch, max_bytes)

    def _peek_batch(self, max_bytes: int) -> Batch | None:
        if self._rows == 0:
            return None
        try:
            return self._read_batch(max_bytes)
        except sqlite3.Error as e:
            self._storage_failed("read the queue", e)
            raise

    def ack(self, batch: Batch) -> None:
        """Delete the batch's rows. If the delete fails they are skipped now and re-sent after a restart."""
        self._run(self._ack, batch)

    async def ack_async(self, batch: Batch) -> None:
        await self._run_async(self._ack, batch)

    def _ack(self, batch: Batch) -> None:
        try:
            last = self._db.execute("SELECT id FROM requests WHERE id > ? ORDER BY id LIMIT 1 OFFSET ?",
                                    (self._acked_through, batch.requests - 1)).fetchone()
        except sqlite3.Error as e:  # the batch stays at the head and is sent again: at-least-once
            self._storage_failed("find delivered requests", e)
            return
        if last is None:  # cannot happen with one consumer; keep the counters honest anyway
            log.error("persistent queue: acknowledged %d requests but fewer are queued", batch.requests)
            self._load(self._db)
            return
        self._acked_through = last[0]
        self._rows -= batch.requests
        self._spans -= batch.spans
        self._bytes -= len(batch.data)
        try:
            self._db.execute("PRAGMA synchronous = NORMAL")
            try:
                with self._db:
                    self._db.execute("DELETE FROM requests WHERE id <= ?", (self._acked_through,))
            finally:
                self._db.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as e:
            self._storage_failed("delete delivered requests (they may be sent again after a restart)", e)
            return
        if self._rows == 0:
            self._shrink()

    def close(self) -> int:
        """Checkpoint and close the file; nothing is lost, so this returns 0. Closing twice is harmless."""
        if self._closed:
            return 0
        self._closed = True
        try:
            return self._run(self._close)
        finally:
            self._worker.shutdown()

    def _close(self) -> int:
        if self._rows:
            log.info("persistent export queue keeps %d spans (%d requests) in %s for the next start",
                     self._spans, self._rows, self.path)
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:
            log.warning("persistent export queue: checkpoint at close failed (%s); the WAL is replayed at "
                        "the next start", e)
        self._db.close()
        self._lock.close()  # releases the flock
        return 0

    # -- opening, checking, setting aside -----------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        """Open (or create) the queue file and load its counters; a damaged file is set aside and
        replaced by an empty one. Errors of the fresh file (a read-only directory, say) are fatal."""
        try:
            db = _connect(self.path)
            try:
                self._load(db)
            except BaseException:
                db.close()
                raise
            return db
        except (sqlite3.DatabaseError, _Unusable) as e:
            self._set_aside(e)
        db = _connect(self.path)
        self._load(db)
        return db

    def _set_aside(self, reason: Exception) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        for suffix in ("", "-wal"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                source.replace(Path(f"{target}{suffix}"))
        Path(f"{self.path}-shm").unlink(missing_ok=True)
        log.error("persistent export queue %s is unreadable (%s): moved it aside to %s and started an empty "
                  "queue; the requests it held will not be delivered", self.path, _describe(reason), target)

    def _load(self, db: sqlite3.Connection) -> None:
        """Counters from the rows left by a previous run (they are delivered first, in order)."""
        rows, spans, nbytes, first = db.execute(
            "SELECT count(*), coalesce(sum(spans), 0), coalesce(sum(nbytes), 0), coalesce(min(id), 1) "
            "FROM requests").fetchone()
        self._rows, self._spans, self._bytes = rows, spans, nbytes
        self._acked_through = first - 1
        if rows:
            log.info("persistent export queue %s: %d spans in %d requests (%.1f MiB) from a previous run will "
                     "be delivered first", self.path, spans, rows, nbytes / (1 << 20))

    # -- reading ------------------------------------------------------------------------------------

    def _read_batch(self, max_bytes: int) -> Batch:
        """Sizes first (no blobs), then the blobs of the rows that fit, in id order."""
        cursor = self._db.execute("SELECT id, spans, nbytes FROM requests WHERE id > ? ORDER BY id",
                                  (self._acked_through,))
        first_id, spans, size = cursor.fetchone()
        last_id, count = first_id, 1
        for row_id, row_spans, row_bytes in cursor:
            if size + row_bytes > max_bytes:
                break
            last_id, count = row_id, count + 1
            spans += row_spans
            size += row_bytes
        cursor.close()
        blobs = [bytes(b) for (b,) in self._db.execute(
            "SELECT data FROM requests WHERE id BETWEEN ? AND ? ORDER BY id", (first_id, last_id))]
        data = blobs[0] if count == 1 else b"".join(blobs)
        return Batch(data, spans, count)

    # -- housekeeping -------------------------------------------------------------------------------

    def _shrink(self) -> None:
        """Return free pages to the file system once the queue has drained (after a long outage)."""
        try:
            free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
            page = self._db.execute("PRAGMA page_size").fetchone()[0]
            if free * page >= _VACUUM_FREE_BYTES:
                # executescript steps the pragma to completion; execute() would free a single page
                self._db.executescript("PRAGMA incremental_vacuum;")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:
            self._storage_failed("shrink the queue file", e)

    def _storage_failed(self, what: str, error: sqlite3.Error) -> None:
        now = time.monotonic()
        if now - self._last_error >= _ERROR_LOG_INTERVAL:
            self._last_error = now
            log.error("persistent export queue %s: cannot %s: %s", self.path, what, error)


class _Unusable(Exception):
    """The file opened but is not an otelloop queue (wrong layout, failed integrity check)."""


def _connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` in WAL mode with full fsync, create the table in a new file, verify an old one.

    ``isolation_level=None`` plus ``with db:`` would not open transactions; the default (deferred) mode with
    the connection as a context manager commits or rolls back each statement group explicitly.
    """
    db = sqlite3.connect(path, timeout=5.0)
    try:
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect only in a new file
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise _Unusable(f"cannot use write-ahead logging (journal mode {mode})")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA journal_size_limit = 67108864")
        _verify_or_create(db)
    except BaseException:
        db.close()
        raise
    _fsync_dir(path.parent)
    return db


def _verify_or_create(db: sqlite3.Connection) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0 and not tables:
        with db:
            db.execute(_SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return
    if version != SCHEMA_VERSION or "requests" not in tables:
        raise _Unusable(f"not an otelloop queue (layout version {version}, tables {sorted(tables)})")
    problems = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise _Unusable("integrity check failed: " + "; ".join(problems))


def _lock(path: Path) -> IO[bytes]:
    handle = open(path, "ab")  # noqa: SIM115  (held open for the queue's lifetime: it is the lock)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise QueueLocked(f"another otelloop process is using the persistent queue in {path.parent}") from None
    return handle


def _fsync_dir(directory: Path) -> None:
    """Make the creation of the queue and WAL files themselves durable, not only their contents."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if isinstance(error, sqlite3.Error) else str(error)
