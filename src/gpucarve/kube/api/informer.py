"""List + watch one kind of object into a local cache, as client-go's informers do.

The first list gives the objects and a resourceVersion; the watch resumes from the last version
seen (bookmarks included). A dropped watch resumes from there after a backoff (`retry_after`:
half a second doubling to 10 s while the failures last); 410 Gone
(the version was compacted away) relists. `on_change` is called after every change, from the
informer's own thread.

A reader that keeps its own state in step with the cache asks `changes_since` the generation it
last read: it gets the objects changed after it by key, so a cycle costs what changed rather
than a pass over every object (the scheduler's pod index, `kube/view/pods/pod_index.py`).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from typing import Any

from gpucarve.kube.api.client import ApiError, Client

log = logging.getLogger("gpucarve.informer")
RETRY_S = 0.5  # the first retry after a failed list or watch, doubled up to MAX_RETRY_S
MAX_RETRY_S = 10.0


def retry_after(failures: int) -> float:
    """Seconds before the next try after `failures` failed list or watch calls in a row: half
    a second, doubling to MAX_RETRY_S, so an API server that is gone is not hammered."""
    return min(MAX_RETRY_S, RETRY_S * float(2 ** max(0, min(failures - 1, 16))))


def worth_saying(failures: int) -> bool:
    """Whether the `failures`-th failure in a row is logged: the 1st, 2nd, 4th, 8th..., a few
    lines while the API server is gone instead of one a retry."""
    return failures > 0 and failures & (failures - 1) == 0


# the change log holds at least this many entries, and at least twice as many as the cache
# holds objects: a reader further behind than that reads the whole cache again
LOG_MIN = 1024


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


class Informer:
    def __init__(
        self,
        client: Client,
        path: str,
        on_change: Callable[[], None] = lambda: None,
        watch_timeout_s: int = 60,
    ) -> None:
        self.client = client
        self.path = path
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._close: Callable[[], None] | None = None
        self.relists = 0
        self.failures = 0  # failed list or watch calls in a row (`retry_after`)
        # bumped with every change to the cache: a reader that saw this number before has
        # seen these items (callers skip work on an unchanged cache)
        self.generation = 0
        # (generation, key) of every change, oldest first; complete for the generations after
        # `_log_from` (a relist or a trim starts it later)
        self._log: list[tuple[int, str]] = []
        self._log_from = 0

    # ------------------------------------------------------------------ reading
    def items(self) -> list[dict[str, Any]]:
        """The cached objects (shared: callers must not change them)."""
        with self._lock:
            return list(self._items.values())

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        """The generation and the objects it stands for, read together."""
        with self._lock:
            return self.generation, list(self._items.values())

    def changes_since(
        self, generation: int
    ) -> tuple[int, dict[str, dict[str, Any] | None] | None, list[dict[str, Any]]]:
        """The generation now and what changed after `generation`: each changed object by key
        (None: deleted), and no list. Where the log does not reach back that far (a relist
        since, or a reader that fell behind), None for the changes and every object instead."""
        with self._lock:
            now = self.generation
            if generation < self._log_from or generation > now:
                return now, None, list(self._items.values())
            start = bisect.bisect_right(self._log, generation, key=lambda e: e[0])
            keys = {k for _, k in self._log[start:]}
            return now, {k: self._items.get(k) for k in keys}, []

    def _logged(self, key: str) -> None:
        """Record a change (under the lock, after the generation was bumped)."""
        self._log.append((self.generation, key))
        if len(self._log) > max(LOG_MIN, 2 * len(self._items)):
            half = len(self._log) // 2
            self._log_from = self._log[half - 1][0]
            del self._log[:half]

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._items.get(key)

    # ------------------------------------------------------------------ running
    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=f"informer {self.path}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        close = self._close
        if close is not None:
            close()  # a watch would otherwise hold its connection until its timeout

    def _opened(self, close: Callable[[], None]) -> None:
        self._close = close
        self.failures = 0  # the watch is open: the API server is back
        if self._stop.is_set():
            close()

    def wait_synced(self, timeout_s: float) -> bool:
        return self.synced.wait(timeout_s)

    def relist(self) -> None:
        reply = self.client.get(self.path)
        items = {_key(o): o for o in reply.get("items") or []}
        with self._lock:
            self._items = items
            self.resource_version = str(reply["metadata"]["resourceVersion"])
            self.generation += 1
            self._log.clear()
            self._log_from = self.generation
        self.relists += 1
        self.synced.set()
        self.on_change()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                    self.failures = 0
                self._watch()
            except ApiError as err:
                if self._stop.is_set():
                    return
                if err.status == 410:
                    log.info("%s: watch version expired, relisting", self.path)
                    self.resource_version = None
                    continue
                self.failures += 1
                delay = retry_after(self.failures)
                if worth_saying(self.failures):
                    log.warning("%s: %s; %d failures in a row, retrying in %.1f s",
                                self.path, err, self.failures, delay)  # fmt: skip
                self._stop.wait(delay)

    def _watch(self) -> None:
        assert self.resource_version is not None
        events = self.client.watch(
            self.path, self.resource_version, self.watch_timeout_s, opened=self._opened
        )
        for event in events:
            if self._stop.is_set():
                return
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise ApiError(
                    "WATCH", self.path, int(obj.get("code") or 0), obj.get("message", "")
                )
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                if rv:
                    self.resource_version = str(rv)
                continue
            with self._lock:
                if kind == "DELETED":
                    self._items.pop(_key(obj), None)
                else:
                    self._items[_key(obj)] = obj
                self.generation += 1
                self._logged(_key(obj))
                if rv:
                    self.resource_version = str(rv)
            self.on_change()
