"""What the image installs: the wheel built from this tree holds the package data the
scheduler reads in a pod (CRDs, the GPU catalog, the built-in example) and the `gpucarve`
entry point the image runs. (Building the image itself needs a container registry.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_package_data_and_the_entry_point(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("gpucarve-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = next(n for n in names if n.endswith("entry_points.txt"))
        entry_points = z.read(entry).decode()
    for needed in (
        "gpucarve/data/crds/queues.gpucarve.io.yaml",
        "gpucarve/data/crds/cohorts.gpucarve.io.yaml",
        "gpucarve/data/crds/podgroups.gpucarve.io.yaml",
        "gpucarve/data/gpu-catalog.yaml",
        "gpucarve/data/examples/three-teams.yaml",
        "gpucarve/py.typed",
        # the dashboard's page, served by the scheduler and written out by simulate
        "gpucarve/dashboard/static/index.html",
        "gpucarve/dashboard/static/app.js",
        "gpucarve/dashboard/static/app.css",
        "gpucarve/kube/scheduler/health.py",
    ):
        assert needed in names, needed
    assert "gpucarve = gpucarve.cli.main:run" in entry_points
