"""Informers on the real API server: the cache follows creations and deletions through the
watch, and a watch that ends resumes from the last version seen, without a relist."""

from __future__ import annotations

import time

import pytest

from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.api import informer as informer_module
from gpucarve.kube.api.client import Client
from gpucarve.kube.api.informer import Informer
from tests.integration.api import Api, wait_for

pytestmark = pytest.mark.integration


def _cm(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "1"}}


def test_the_cache_follows_the_watch_and_resumes_it(stack: LocalStack, admin: Api) -> None:
    admin.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "informer-test"}},
    )
    path = "/api/v1/namespaces/informer-test/configmaps"
    # every watch ends after a second: the informer must resume each from where it was
    inf = Informer(Client.from_kubeconfig(stack.kubeconfig()), path, watch_timeout_s=1)
    inf.start()
    try:
        assert inf.wait_synced(10)
        admin.create(path, _cm("a"))
        wait_for(lambda: inf.get("informer-test/a"), what="the created object")
        admin.call("DELETE", f"{path}/a")
        wait_for(lambda: inf.get("informer-test/a") is None, what="the deletion")
        time.sleep(2.5)  # two watches ended meanwhile
        for i in range(3):
            admin.create(path, _cm(f"later-{i}"))
        wait_for(lambda: inf.get("informer-test/later-2"), what="events after the resumes")
        assert sorted(o["metadata"]["name"] for o in inf.items()) == [
            "later-0",
            "later-1",
            "later-2",
        ]
        assert inf.relists == 1  # resumed by resourceVersion, never listed again
    finally:
        inf.stop()


def test_changes_since_a_generation_name_what_changed_and_only_that(
    stack: LocalStack, admin: Api
) -> None:
    admin.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "informer-log"}},
    )
    path = "/api/v1/namespaces/informer-log/configmaps"
    for name in ("keep", "change", "drop"):
        admin.create(path, _cm(name))
    inf = Informer(Client.from_kubeconfig(stack.kubeconfig()), path)
    inf.start()
    try:
        assert inf.wait_synced(10)
        # a reader that has read nothing gets every object, and no changes
        seen, changes, every = inf.changes_since(-1)
        assert changes is None
        assert sorted(o["metadata"]["name"] for o in every) == ["change", "drop", "keep"]
        assert inf.changes_since(seen)[1:] == ({}, [])  # nothing since
        admin.call("PATCH", f"{path}/change", {"data": {"k": "2"}}, "application/merge-patch+json")
        admin.call("DELETE", f"{path}/drop")
        admin.create(path, _cm("new"))
        wait_for(lambda: inf.get("informer-log/new"), what="the new object")
        wait_for(lambda: inf.get("informer-log/drop") is None, what="the deletion")
        now, changes, every = inf.changes_since(seen)
        assert changes is not None and every == []
        assert sorted(changes) == ["informer-log/change", "informer-log/drop", "informer-log/new"]
        assert changes["informer-log/drop"] is None
        assert changes["informer-log/change"] is inf.get("informer-log/change")
        assert changes["informer-log/change"]["data"] == {"k": "2"}
        assert inf.changes_since(now)[1] == {}
        # a relist: the log starts again, and a reader from before it reads everything
        inf.relist()
        _, changes, every = inf.changes_since(now)
        assert changes is None
        assert sorted(o["metadata"]["name"] for o in every) == ["change", "keep", "new"]
    finally:
        inf.stop()


def test_a_reader_further_behind_than_the_log_reads_everything(
    stack: LocalStack, admin: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(informer_module, "LOG_MIN", 4)
    admin.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "informer-trim"}},
    )
    path = "/api/v1/namespaces/informer-trim/configmaps"
    inf = Informer(Client.from_kubeconfig(stack.kubeconfig()), path)
    inf.start()
    try:
        assert inf.wait_synced(10)
        start = inf.changes_since(-1)[0]
        for i in range(3):
            admin.create(path, _cm(f"c{i}"))
        wait_for(lambda: inf.get("informer-trim/c2"), what="three objects")
        recent = inf.changes_since(start)
        assert recent[1] is not None and sorted(recent[1]) == [
            f"informer-trim/c{i}" for i in range(3)
        ]

        # the log keeps at most max(LOG_MIN, twice the objects) changes: ten changes of one
        # object leave the first reader behind it
        def patch(v: int) -> None:
            admin.call("PATCH", f"{path}/c0", {"data": {"k": str(v)}},
                       "application/merge-patch+json")  # fmt: skip
            wait_for(lambda: (inf.get("informer-trim/c0") or {})["data"]["k"] == str(v),
                     what=f"change {v}")  # fmt: skip

        for v in range(10):
            patch(v)
        _, changes, every = inf.changes_since(start)
        assert changes is None and len(every) == 3
        mid = inf.changes_since(-1)[0]
        patch(10)
        _, changes, _ = inf.changes_since(mid)
        assert changes == {"informer-trim/c0": inf.get("informer-trim/c0")}
    finally:
        inf.stop()
