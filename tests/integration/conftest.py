"""A real etcd + kube-apiserver + kwok for the integration tests, started once per session and
stopped by PID. The binaries are built by tools/testenv.sh (cached per user)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    off = {
        "webhook": "no policy: the tests of the API client, informers, CRDs, RBAC, charts "
        "and the test environment itself create no pod in a governed namespace"
    }
    s = LocalStack(find_binaries(), tmp_path_factory.mktemp("kube"), off=off)
    with s:
        yield s


@pytest.fixture(scope="session")
def admin(stack: LocalStack) -> Api:
    return Api(stack.server, stack.tokens[ADMIN_USER])
