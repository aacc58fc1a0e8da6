"""No input makes `gpucarve validate` crash: random text, random YAML, and random mutations
of the example policy all end in exit 0 (valid) or 2 (errors reported), never a traceback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.core.cluster import build_cluster
from gpucarve.core.problems import InvalidInput
from tests.fuzz.budget import fuzz_settings
from tests.paths import BUILTIN

runner = CliRunner()
EXAMPLE = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
KEYS = [
    "name",
    "pools",
    "queues",
    "quota",
    "nominal",
    "gpuModel",
    "sharing",
    "mig",
    "layout",
    "replicas",
    "cohort",
    "nodes",
    "gpusPerNode",
    "perGpu",
    "gpus",
    "3g.40gb",
    "h100-full",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        ["mig", "exclusive", "time-slicing", "mps", "A100-80GB", "L40S", "3g.40gb", "-1", ""]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=12,
)

FUZZ = fuzz_settings(150)


def check(tmp_path: Path, text: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = runner.invoke(app, ["validate", str(f)])
    assert result.exit_code in (0, 2), (text, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        text,
        repr(result.exception),
    )
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert "fix:" in result.stderr


@FUZZ
@given(text=st.text(max_size=300))
def test_random_text(tmp_path: Path, text: str) -> None:
    check(tmp_path, text)


@FUZZ
@given(doc=values)
def test_random_yaml_values(tmp_path: Path, doc: Any) -> None:
    check(tmp_path, yaml.safe_dump(doc, allow_unicode=True))


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(EXAMPLE)[1:]


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(EXAMPLE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent: Any = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            key = path[-1]
            action = draw(st.sampled_from(["delete", "replace", "add-key", "duplicate"]))
            if action == "delete":
                del parent[key]
            elif action == "replace":
                parent[key] = draw(values)
            elif action == "add-key" and isinstance(parent[key], dict):
                parent[key][draw(st.sampled_from(KEYS))] = draw(values)
            elif action == "duplicate" and isinstance(parent, list):
                parent.append(copy.deepcopy(parent[key]))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path; keep the document as it is
    return doc


@FUZZ
@given(doc=mutated())
def test_mutated_example(tmp_path: Path, doc: Any) -> None:
    check(tmp_path, yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))


@FUZZ
@given(doc=mutated())
def test_whatever_validates_builds_a_consistent_cluster(doc: Any) -> None:
    try:
        loaded = build_policy(doc, packaged_catalog())
    except InvalidInput as exc:
        problems = exc.problems
        assert problems
        return
    state = build_cluster(loaded.policy)
    assert state.invariant_violations() == []
    for flavor, capacity in loaded.policy.capacity.items():
        assert len(state.free_slices(flavor)) == capacity
