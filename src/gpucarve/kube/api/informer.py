"""List + watch one kind of object into a local cache, as client-go's informers do.

The first list gives the objects and a resourceVersion; the watch resumes from the last version
seen (bookmarks included). A dropped watch resumes from there after a short backoff; 410 Gone
(the version was compacted away) relists. `on_change` is called after every change, from the
informer's own thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from gpucarve.kube.api.client import ApiError, Client

log = logging.getLogger("gpucarve.informer")
RETRY_S = 0.5


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
        # bumped with every change to the cache: a reader that saw this number before has
        # seen these items (callers skip work on an unchanged cache)
        self.generation = 0

    # ------------------------------------------------------------------ reading
    def items(self) -> list[dict[str, Any]]:
        """The cached objects (shared: callers must not change them)."""
        with self._lock:
            return list(self._items.values())

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        """The generation and the objects it stands for, read together."""
        with self._lock:
            return self.generation, list(self._items.values())

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
        self.relists += 1
        self.synced.set()
        self.on_change()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self._watch()
            except ApiError as err:
                if self._stop.is_set():
                    return
                if err.status == 410:
                    log.info("%s: watch version expired, relisting", self.path)
                    self.resource_version = None
                    continue
                log.warning("%s: %s; retrying", self.path, err)
                self._stop.wait(RETRY_S)

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
                if rv:
                    self.resource_version = str(rv)
            self.on_change()
