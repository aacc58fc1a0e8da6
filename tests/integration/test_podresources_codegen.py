"""The committed PodResources client is what tools/gen_podresources.sh makes from the
published protobuf (k8s.io/kubelet's module, the pinned grpcio-tools and mypy-protobuf)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "src" / "gpucarve" / "agent" / "podresources"


def test_the_generated_client_is_up_to_date(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gen_podresources.sh"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in COMMITTED.iterdir() if p.suffix in (".py", ".pyi"))
    for name in made:
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), (
            f"{name} differs: run tools/gen_podresources.sh"
        )
