from __future__ import annotations

from pathlib import Path

import pytest

from gpucarve.config.catalog_file import load_catalog
from gpucarve.core.problems import InvalidInput


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "catalog.yaml"
    p.write_text(text)
    return p


HEAD = "apiVersion: gpucarve.io/v1alpha1\nkind: GpuCatalog\nmodels:\n"


def test_extends_overrides_only_named_keys(tmp_path: Path) -> None:
    f = write(
        tmp_path, HEAD + "  - {id: H100-SXM5-80GB, extends: H100-SXM5-80GB, pricePerGpuHour: 1.5}\n"
    )
    cat = load_catalog([f])
    m = cat.get("H100-SXM5-80GB")
    assert m.price_per_gpu_hour == 1.5
    assert m.mig is not None and len(m.mig.profiles) == 7


def test_new_model_from_scratch(tmp_path: Path) -> None:
    f = write(
        tmp_path,
        HEAD
        + """  - id: RTX-PRO-6000
    flavorPrefix: rtxpro6000
    gfdProducts: [NVIDIA-RTX-PRO-6000]
    architecture: blackwell
    computeCapability: "12.0"
    memoryGB: 96
    memoryMiB: 97887
    smCount: 188
""",
    )
    cat = load_catalog([f])
    assert cat.lookup("NVIDIA-RTX-PRO-6000-SHARED").id == "RTX-PRO-6000"


@pytest.mark.parametrize(
    ("body", "code", "where"),
    [
        ("  - {id: X, extends: NOPE}\n", "unknown-model", "models[0].extends"),
        ("  - {id: T4, extends: T4, smCount: zero}\n", "wrong-type", "models[0].smCount"),
        ("  - {id: T4, extends: T4, colour: red}\n", "unknown-key", "models[0].colour"),
        (
            "  - id: A100-80GB\n    extends: A100-80GB\n    mig:\n      memorySlices: 8\n"
            "      computeSlices: 7\n      profiles:\n"
            "        - {name: 3g.40gb, computeSlices: 3, memorySlices: 4, memoryMiB: 40000,"
            " maxInstances: 2, starts: [0, 6]}\n",
            "bad-start",
            "models[0].mig.profiles[0].starts",
        ),
    ],
)
def test_bad_catalog_files_name_the_field(tmp_path: Path, body: str, code: str, where: str) -> None:
    f = write(tmp_path, HEAD + body)
    with pytest.raises(InvalidInput) as exc:
        load_catalog([f])
    first = exc.value.problems[0]
    assert (first.code, first.location) == (code, where)


def test_wrong_kind_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path, "apiVersion: gpucarve.io/v1alpha1\nkind: Policy\nmodels: []\n")
    with pytest.raises(InvalidInput) as exc:
        load_catalog([f])
    assert exc.value.problems[0].location == "kind"


def test_catalog_errors_carry_line_numbers(tmp_path: Path) -> None:
    f = write(tmp_path, HEAD + "  - id: T4\n    extends: T4\n    smCount: lots\n")
    with pytest.raises(InvalidInput) as exc:
        load_catalog([f])
    assert exc.value.problems[0].line == 6
