"""Headless Chromium for the dashboard's tests and benchmark: Debian's `chromium` and
`chromium-driver` packages, driven by Selenium. Nothing downloads a browser: the driver is
named by path (Selenium Manager never runs). Outside CI a machine without them skips the
browser tests and says how to get them; CI (GPUCARVE_REQUIRE_BROWSER=1) fails instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

HOW = "install Debian's packages: apt-get install chromium chromium-driver"


AXE_VERSION = "4.14.1"  # tools/axe.sh's


def axe_source() -> str:
    """axe-core's script, as tools/axe.sh caches it (skips, or fails in CI, without it)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = cache / "gpucarve" / f"axe-core-{AXE_VERSION}" / "node_modules/axe-core/axe.min.js"
    if not path.is_file():
        how = "run tools/axe.sh (it installs axe-core from the npm registry)"
        if os.environ.get("GPUCARVE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"no {path}: {how}")
        pytest.skip(f"no {path}: {how}")
    return path.read_text()


def binaries() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def need_browser() -> tuple[str, str]:
    found = binaries()
    if found is None:
        if os.environ.get("GPUCARVE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"no chromium and chromedriver: {HOW}")
        pytest.skip(f"no chromium and chromedriver: {HOW}")
    return found


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[webdriver.Chrome]:
    browser, driver = need_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    try:
        yield d
    finally:
        d.quit()


def drawn(d: webdriver.Chrome, timeout_s: float = 15.0) -> str:
    """Wait until the page has drawn its current route; its text."""
    from selenium.webdriver.support.ui import WebDriverWait

    script = (
        "const m = document.getElementById('main');"
        "return m && m.dataset.ready === 'true' ? m.innerText : null"
    )
    text: str = WebDriverWait(d, timeout_s).until(lambda d: d.execute_script(script))
    return text


def show(d: webdriver.Chrome, base: str, route: str) -> str:
    """Open the dashboard at `route` (fresh page load) and wait for it to draw."""
    d.get(f"{base}/?r={route}#{route}")
    return drawn(d)
