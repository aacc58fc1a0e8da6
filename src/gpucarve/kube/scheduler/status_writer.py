"""Pending pods' reasons, written by a few threads with a backlog that cannot grow without end.

Each pod keeps only its latest message: one that changes again before its turn replaces the
queued one instead of queueing a second write, so under churn the backlog is at most one write
per pending pod. A pod never told why it waits goes before one whose reason only changed, so a
new pod is not stuck behind a flood of updates; a pod bound meanwhile is dropped (a late
"Unschedulable" would contradict its binding). One pod's writes never run at once: a newer
reason waits for the write before it, which could otherwise land last and leave the older
reason standing."""

from __future__ import annotations

import threading
from collections.abc import Callable


class LatestWrites:
    def __init__(self, write: Callable[[str, str], None], workers: int = 4) -> None:
        self._write = write
        self._cond = threading.Condition()
        self._fresh: dict[str, str] = {}  # dicts keep arrival order: first come, first written
        self._updates: dict[str, str] = {}
        self._writing: set[str] = set()  # keys being written now
        self._closed = False
        self._threads = [
            threading.Thread(target=self._run, name=f"pending-status-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def offer(self, key: str, value: str, fresh: bool) -> None:
        with self._cond:
            if key in self._fresh or fresh:
                self._fresh[key] = value
                self._updates.pop(key, None)
            else:
                self._updates[key] = value
            self._cond.notify()

    def drop(self, key: str) -> None:
        with self._cond:
            self._fresh.pop(key, None)
            self._updates.pop(key, None)

    @property
    def backlog(self) -> int:
        with self._cond:
            return len(self._fresh) + len(self._updates)

    def shutdown(self) -> None:
        """Write what is queued, then stop the threads."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()

    def _next(self) -> tuple[str, str] | None:
        with self._cond:
            while True:
                for queue in (self._fresh, self._updates):
                    # at most one key per worker is skipped: few are being written at once
                    key = next((k for k in queue if k not in self._writing), None)
                    if key is not None:
                        self._writing.add(key)
                        return key, queue.pop(key)
                if self._closed and not self._fresh and not self._updates:
                    return None  # closed and empty
                self._cond.wait()

    def _run(self) -> None:
        while (item := self._next()) is not None:
            try:
                self._write(*item)
            finally:
                with self._cond:
                    self._writing.discard(item[0])
                    self._cond.notify_all()
