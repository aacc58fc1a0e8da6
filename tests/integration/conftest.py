"""A real etcd + kube-apiserver + kwok for the integration tests, started once per session and
stopped by PID. The binaries are built by tools/testenv.sh (cached per user)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = LocalStack(find_binaries(), tmp_path_factory.mktemp("kube"))
    with s:
        yield s


@pytest.fixture(scope="session")
def admin(stack: LocalStack) -> Api:
    return Api(stack.server, stack.tokens[ADMIN_USER])
