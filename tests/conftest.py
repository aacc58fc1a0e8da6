from __future__ import annotations

import pytest

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core.catalog import Catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return packaged_catalog()
