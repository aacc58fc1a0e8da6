"""The fill experiment's inputs: the node and pod lists of the Alibaba GPU-sharing trace
(`openb_node_list_gpu_node.csv`, `openb_pod_list_*.csv`) read into arrays, and the seeded
arrival order (shuffled, then inflated to 1.3 x the cluster's GPU capacity). `fill` runs the
experiment on them; `fill_marks` and the bounds read them too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpucarve.config.csv_rows import CsvRow, read_csv
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import whole_number

MILLI = 1000
MAX_GPUS = 8
MAX_SPEC_CPU = 128_000  # the published simulator's normalisation constants
MAX_SPEC_GPU = 8_000
MAX_CELL = 10**9  # far above the trace's largest node (96 CPUs, 768 GiB); int64 stays exact

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Nodes:
    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    gpus: IntArray
    model: tuple[str, ...]

    @property
    def gpu_capacity(self) -> int:
        return int(self.gpus.sum()) * MILLI


@dataclass(frozen=True)
class Pods:
    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    spec: tuple[frozenset[str], ...]  # allowed models; empty: any

    def request(self) -> IntArray:
        return np.asarray(self.num_gpu * self.gpu_milli, dtype=np.int64)


def _bad(source: str, line: int, message: str) -> InvalidInput:
    return InvalidInput(
        source, [Problem((f"line {line}",), "bad-row", message, "fix the row", line=line)]
    )


def _read(path: Path, required: Sequence[str]) -> list[CsvRow]:
    _, rows = read_csv(str(path), "the trace's CSV", required)
    for row in rows:
        if row.problem is not None:
            raise InvalidInput(str(path), [row.problem])
    return rows


def _ints(rows: list[CsvRow], key: str, source: str) -> IntArray:
    out = []
    for r in rows:
        try:
            out.append(whole_number(r.get(key), key, MAX_CELL))
        except ValueError as exc:
            raise _bad(source, r.line, str(exc)) from None
    return np.asarray(out, dtype=np.int64)


def _none_left(source: str, message: str, fix: str) -> InvalidInput:
    return InvalidInput(source, [Problem((), "nothing-to-fill", message, fix)])


def load_nodes(path: str | Path) -> Nodes:
    p = Path(path)
    rows = _read(p, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    gpus = _ints(rows, "gpu", str(p))
    if (gpus > MAX_GPUS).any():
        line = rows[int(np.argmax(gpus > MAX_GPUS))].line
        raise _bad(str(p), line, f"more than {MAX_GPUS} GPUs on a node")
    if int(gpus.sum()) == 0:
        raise _none_left(str(p), "no node with a GPU", "pass the trace's GPU node list")
    return Nodes(
        tuple(r.get("sn") for r in rows),
        _ints(rows, "cpu_milli", str(p)),
        _ints(rows, "memory_mib", str(p)),
        gpus,
        tuple(r.get("model") for r in rows),
    )


def load_pods(path: str | Path) -> Pods:
    p = Path(path)
    rows = _read(p, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    num_gpu = _ints(rows, "num_gpu", str(p))
    milli = _ints(rows, "gpu_milli", str(p))
    for r, n, m in zip(rows, num_gpu, milli, strict=True):
        if m > MILLI or (n > 1 and m != MILLI) or (n > 0 and m == 0):
            raise _bad(str(p), r.line, f"num_gpu {n} with gpu_milli {m} is not a valid request")
    if not int((num_gpu * milli).sum()):
        raise _none_left(
            str(p), "no pod asks for a GPU", "pass a pod list with GPU pods (num_gpu ≥ 1)"
        )
    spec = tuple(frozenset(x for x in r.get("gpu_spec").split("|") if x) for r in rows)
    order = sorted(range(len(rows)), key=lambda i: rows[i].get("name"))
    pick = np.asarray(order, dtype=np.int64)
    return Pods(
        tuple(rows[i].get("name") for i in order),
        _ints(rows, "cpu_milli", str(p))[pick],
        _ints(rows, "memory_mib", str(p))[pick],
        num_gpu[pick],
        milli[pick],
        tuple(spec[i] for i in order),
    )


def arrival_order(pods: Pods, capacity: int, seed: int, inflation: float = 1.3) -> list[int]:
    """Shuffle with the seed, then append pods drawn with replacement until the next draw would
    push the total GPU request over `inflation` x capacity (compared, like the published code,
    using the drawn pod's per-GPU milli)."""
    if not capacity or not int(pods.request().sum()):
        raise ValueError("the fill needs GPUs and pods that ask for them")  # loaders refuse both
    rng = random.Random(seed)
    order = list(range(len(pods.names)))
    rng.shuffle(order)
    total = int(pods.request().sum())
    limit = inflation * capacity
    while True:
        i = rng.randrange(len(pods.names))
        if total + int(pods.gpu_milli[i]) > limit:
            break
        order.append(i)
        total += int(pods.num_gpu[i] * pods.gpu_milli[i])
    return order
