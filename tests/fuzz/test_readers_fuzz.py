"""Every reader of user files, fed hostile text: YAML with aliases, anchors inside anchors,
deep nesting, Unicode digits, NaN and control characters; CSV and JSONL traces with broken
rows; mig-parted files; catalogs; Alibaba node and pod lists. Each either reads the file or
raises `InvalidInput` whose problems all have a fix, never any other exception, and what it
reads stays as small as the bounds promise."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpucarve.config.catalog_file import load_catalog, packaged_catalog
from gpucarve.config.migparted_import import import_mig_config
from gpucarve.config.policy_build import load_policy
from gpucarve.config.yaml_source import MAX_EXPANSION, read_yaml
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.fill.trace import load_nodes, load_pods
from gpucarve.sim.traces.alibaba_csv import read_nodes, read_pods
from gpucarve.sim.traces.trace_io import CSV_COLUMNS, load_trace
from tests.fuzz.budget import fuzz_settings
from tests.paths import BUILTIN

POLICY_TEXT = (BUILTIN / "three-teams.yaml").read_text()
POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
CATALOG = packaged_catalog()

# Values that broke readers before: Unicode digits, numbers YAML and JSON read specially,
# control characters, huge numbers, empty strings.
NASTY = [
    "²", "１２", "٣", "6400²", ".nan", ".inf", "-.inf", "NaN", "Infinity", "1e400", "0x20B510DE",
    "9" * 40, "-5", "--5", "", " ", "\t", "\x08", "\x7f", "\u2028", "\ufeff", "~", "null", "yes",
    "2001-13-45", '"', "'", ",", "a,b", "{", "[", "&a", "*a", "!!python/object", "<<",
]  # fmt: skip
scalars = st.one_of(
    st.sampled_from(NASTY),
    st.integers(-(10**30), 10**30).map(str),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
)


@st.composite
def hostile_yaml(draw: st.DrawFn) -> str:
    """YAML text: anchors reused inside anchors (fan-out and levels), nesting, nasty scalars,
    duplicate keys, and pieces of a real policy."""
    parts: list[str] = []
    levels = draw(st.integers(0, 8))
    fan = draw(st.integers(1, 12))
    if levels:
        parts.append(f"a0: &a0 [{', '.join([draw(st.sampled_from(['x', '1', '²']))] * fan)}]")
        for i in range(1, levels):
            parts.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]")
    depth = draw(st.integers(0, 150))
    if depth:
        opener = draw(st.sampled_from(["[", "{k: "]))
        closer = "]" if opener == "[" else "}"
        parts.append("deep: " + opener * depth + "1" + closer * depth)
    if draw(st.booleans()):
        parts.append("self: &s {me: *s}")
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(["kind", "pools", "nodes", "replicas", "weight", "x", "5"]))
        parts.append(f"{key}: {json.dumps(draw(scalars))}")
    if draw(st.booleans()):
        lines = POLICY_TEXT.splitlines()
        cut = draw(st.integers(0, len(lines)))
        parts = lines[:cut] + parts
    text = "\n".join(parts) + "\n"
    if draw(st.booleans()) and text:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(NASTY)) + text[at:]
    return text


def expanded_size(value: Any, budget: int) -> int:
    """Nodes of `value` with shared references counted each time, stopping past `budget`."""
    seen, stack = 0, [value]
    while stack and seen <= budget:
        v = stack.pop()
        seen += 1
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return seen


def refused_cleanly(read: Callable[[], object]) -> object | None:
    try:
        return read()
    except InvalidInput as exc:
        problems = exc.problems
    assert problems, "InvalidInput without a problem"
    for p in problems:
        assert p.fix and p.message and p.code
    return None


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    return path


@fuzz_settings(150)
@given(text=hostile_yaml())
def test_yaml_readers(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "doc.yaml", text)
    doc = refused_cleanly(lambda: read_yaml(path))
    if doc is not None:
        limit = 2 * len(text) + MAX_EXPANSION
        assert expanded_size(doc.data, limit) <= limit  # type: ignore[attr-defined]
    refused_cleanly(lambda: load_policy(path))
    refused_cleanly(lambda: load_catalog([path]))
    refused_cleanly(lambda: import_mig_config(path, CATALOG))


MIGPARTED = {
    "version": "v1",
    "mig-configs": {
        "custom": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [0, 1], "mig-enabled": True, "device-filter": "0x20B510DE",
             "mig-devices": {"3g.40gb": 2}},
        ]
    },
}  # fmt: skip
leaf = st.one_of(scalars, st.integers(-3, 2**33), st.booleans(), st.none(), st.floats())


def mutate(doc: Any, entries: Any, target: str, value: Any, draw: st.DrawFn) -> None:
    fields = ["devices", "mig-enabled", "device-filter", "mig-devices"]
    if target == "entry":
        entries[draw(st.integers(0, 1))][draw(st.sampled_from(fields))] = value
    elif target == "config":
        doc["mig-configs"][draw(st.sampled_from(["custom", "other", "5"]))] = value
    elif target == "counts":
        profile = draw(st.sampled_from(["1g.10gb", "7g.80gb", "9g.1gb", "²"]))
        entries[0]["mig-devices"][profile] = value
    else:
        doc[draw(st.sampled_from(["version", "mig-configs"]))] = value


@st.composite
def mutated_migparted(draw: st.DrawFn) -> Any:
    doc: Any = json.loads(json.dumps(MIGPARTED))
    for _ in range(draw(st.integers(1, 4))):
        configs = doc.get("mig-configs")
        entries = configs.get("custom") if isinstance(configs, dict) else None
        target = draw(st.sampled_from(["entry", "config", "root", "counts"]))
        value = draw(
            st.one_of(leaf, st.lists(leaf, max_size=3), st.dictionaries(scalars, leaf, max_size=3))
        )
        try:
            mutate(doc, entries, target, value, draw)
        except (TypeError, KeyError, IndexError, AttributeError):
            continue  # an earlier mutation replaced what this one would change
    return doc


@fuzz_settings(150)
@given(
    doc=mutated_migparted(), model=st.sampled_from([None, "A100-80GB", "L40S", "H100-SXM5-80GB"])
)
def test_mig_parted_import(tmp_path: Path, doc: Any, model: str | None) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True).replace("'0x20B510DE'", "0x20B510DE")
    path = write(tmp_path, "m.yaml", text)
    gpu = CATALOG.lookup(model) if model else None
    refused_cleanly(lambda: import_mig_config(path, CATALOG, None, gpu))
    refused_cleanly(lambda: import_mig_config(path, CATALOG, "custom", gpu))


@st.composite
def csv_text(draw: st.DrawFn, header: tuple[str, ...], good: list[str]) -> str:
    cols = list(header)
    if draw(st.booleans()):
        cols = draw(st.permutations(cols))
    if draw(st.integers(0, 5)) == 0:
        cols = cols[: draw(st.integers(0, len(cols)))] + draw(
            st.lists(st.sampled_from(["x", "", "name"]), max_size=2)
        )
    rows = [",".join(cols)]
    for _ in range(draw(st.integers(0, 6))):
        cells = list(draw(st.sampled_from(good)).split(","))
        for _ in range(draw(st.integers(0, 3))):
            if cells:
                cells[draw(st.integers(0, len(cells) - 1))] = draw(scalars).replace("\n", "")
        if draw(st.integers(0, 4)) == 0:
            cells = cells[: draw(st.integers(0, len(cells)))]
        if draw(st.integers(0, 6)) == 0:
            cells.append("extra")
        rows.append(",".join(cells))
    text = "\n".join(rows) + "\n"
    if draw(st.integers(0, 8)) == 0:
        text = "\ufeff" + text
    return text


TRACE_ROWS = [
    "a,research,,,0,3600,2,,8,,,,,,,rack,90",
    "b,production,,production-critical,10,600,1,,,3g.40gb,,,,2,8Gi,,50",
    "c,notebooks,data-science,,20,900,1,,,,,,10240,,,,20",
    "d,research,,,30,100,1,,,,1,,,,,,",
]


@fuzz_settings(150)
@given(text=csv_text(CSV_COLUMNS, TRACE_ROWS), lenient=st.booleans())
def test_csv_traces(tmp_path: Path, text: str, lenient: bool) -> None:
    path = write(tmp_path, "t.csv", text)
    loaded = refused_cleanly(lambda: load_trace(path, POLICY, lenient))
    if loaded is not None and lenient:
        rows = len([r for r in text.splitlines()[1:] if r.strip()])
        assert len(loaded.workloads) + loaded.skipped <= rows  # type: ignore[attr-defined]


json_values = st.recursive(
    st.one_of(leaf, st.just(float("nan"))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["name", "namespace", "duration", "podSets", "utilisation", "count", "resources"]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=15,
)


@fuzz_settings(150)
@given(
    lines=st.lists(
        st.one_of(
            json_values.map(json.dumps), st.sampled_from(["[" * 5000, "{", "1" * 5000, "NaN"])
        ),
        max_size=5,
    ),
    lenient=st.booleans(),
)
def test_jsonl_traces(tmp_path: Path, lines: list[str], lenient: bool) -> None:
    path = write(tmp_path, "t.jsonl", "\n".join(lines) + "\n")
    refused_cleanly(lambda: load_trace(path, POLICY, lenient))


NODE_ROWS = ["n1,32000,65536,2,T4", "n2,96000,786432,8,V100M32", "n3,8000,1024,0,"]
POD_ROWS = [
    "p1,1000,1024,1,1000,,LS,Running,0,100,0",
    "p2,2000,2048,1,500,T4|P100,BE,Running,10,500,20",
    "p3,100,100,0,0,,LS,Running,5,50,5",
    "p4,4000,4096,2,1000,V100M32,LS,Running,7,70,7",
]
POD_HEADER = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)  # fmt: skip


@fuzz_settings(100)
@given(
    nodes=csv_text(("sn", "cpu_milli", "memory_mib", "gpu", "model"), NODE_ROWS),
    pods=csv_text(POD_HEADER, POD_ROWS),
    lenient=st.booleans(),
)
def test_alibaba_and_fill_lists(tmp_path: Path, nodes: str, pods: str, lenient: bool) -> None:
    n, p = write(tmp_path, "n.csv", nodes), write(tmp_path, "p.csv", pods)
    refused_cleanly(lambda: read_nodes(n, lenient))
    refused_cleanly(lambda: read_pods(p, lenient))
    refused_cleanly(lambda: (load_nodes(n), load_pods(p)))


@pytest.mark.parametrize("levels", [3, 6, 12])
def test_alias_bombs_of_any_size_are_measured_not_expanded(tmp_path: Path, levels: int) -> None:
    """10**levels values: 1,000 are read, a million and a trillion refused, both at once."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    if 10**levels <= MAX_EXPANSION:
        assert len(read_yaml(path).data[f"a{levels - 1}"]) == 10
        return
    with pytest.raises(InvalidInput) as exc:
        read_yaml(path)
    assert exc.value.problems[0].code == "yaml-alias-expansion"
