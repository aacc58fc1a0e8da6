"""Informers on the real API server: the cache follows creations and deletions through the
watch, and a watch that ends resumes from the last version seen, without a relist."""

from __future__ import annotations

import time

import pytest

from gpucarve.devcluster.stack import LocalStack
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
