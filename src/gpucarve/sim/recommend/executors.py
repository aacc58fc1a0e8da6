"""Where `simulate --recommend`'s replays run: in this process, on this machine's cores
(`--jobs`), or on a Ray cluster (`--ray ADDRESS`). Each is handed the traces once (a worker
process inherits them; Ray keeps one copy in its object store) and then only policies as YAML
text; results come back in the order asked, so the search's choice never depends on which
replay finished first. Replays already made are not made again."""

from __future__ import annotations

import hashlib
import importlib
import multiprocessing
import socket
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import gpucarve
from gpucarve.config.policy_build import load_policy_text
from gpucarve.sim.recommend.search import Case, Figures
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator


def replay(text: str, catalog: Sequence[str], case: Case) -> Figures:
    """One policy (YAML) replayed on one case."""
    policy = load_policy_text(text, "recommended policy", catalog).policy
    result = Simulator(policy, list(case.workloads), case.utilisation, SimConfig()).run()
    return Figures.of(summarize(result, case.utilisation, case.window))


class _Memo:
    """The figures of replays already made, by policy text and case."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], Figures] = {}

    @staticmethod
    def key(text: str, case: str) -> tuple[str, str]:
        return hashlib.sha256(text.encode()).hexdigest(), case

    def missing(self, jobs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        todo: dict[tuple[str, str], tuple[str, str]] = {}
        for text, case in jobs:
            k = self.key(text, case)
            if k not in self.seen:
                todo.setdefault(k, (text, case))
        return list(todo.values())

    def answer(self, jobs: Sequence[tuple[str, str]]) -> list[Figures]:
        return [self.seen[self.key(t, c)] for t, c in jobs]


class InProcess:
    """Replays one after another in this process."""

    def __init__(self, cases: Sequence[Case], catalog: Sequence[str]) -> None:
        self.cases = {c.key: c for c in cases}
        self.catalog = tuple(catalog)
        self.memo = _Memo()
        self.replays = 0

    def evaluate(self, jobs: Sequence[tuple[str, str]]) -> list[Figures]:
        for text, case in self.memo.missing(jobs):
            self.memo.seen[self.memo.key(text, case)] = replay(text, self.catalog, self.cases[case])
            self.replays += 1
        return self.memo.answer(jobs)


# a worker process's cases and catalog, set once when it starts
_WORKER: dict[str, Any] = {}


def _start_worker(cases: Mapping[str, Case], catalog: tuple[str, ...]) -> None:
    _WORKER["cases"], _WORKER["catalog"] = cases, catalog


def _worker_replay(job: tuple[str, str]) -> Figures:
    text, case = job
    return replay(text, _WORKER["catalog"], _WORKER["cases"][case])


class Processes:
    """Replays on `jobs` worker processes of this machine (forked: they inherit the traces)."""

    def __init__(self, cases: Sequence[Case], catalog: Sequence[str], jobs: int) -> None:
        self.memo = _Memo()
        self.replays = 0
        self.pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=({c.key: c for c in cases}, tuple(catalog)),
        )

    def evaluate(self, jobs: Sequence[tuple[str, str]]) -> list[Figures]:
        todo = self.memo.missing(jobs)
        for (text, case), figs in zip(todo, self.pool.map(_worker_replay, todo), strict=True):
            self.memo.seen[self.memo.key(text, case)] = figs
        self.replays += len(todo)
        return self.memo.answer(jobs)

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class RayUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be reached or runs another gpucarve."""


def _ray_replay(text: str, catalog: Sequence[str], case: Case) -> Figures:
    return replay(text, catalog, case)


def _ray_version() -> str:
    return gpucarve.__version__


# how long a cluster's address has to answer before the search says there is none (Ray itself
# retries an unreachable address for minutes)
CONNECT_S = 5.0


def _reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) address that nothing answers at is refused at once."""
    if address in ("local", "auto"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"{address!r} is not a Ray address: give HOST:PORT, local or auto")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except OSError as exc:
        raise RayUnavailable(f"nothing answers at {address}: {exc}") from None


class OnRay:
    """Replays as Ray tasks on the cluster at `address` ("local" starts one on this machine
    for the run; "auto" joins the one this machine belongs to). The cluster's Python must
    import this version of gpucarve."""

    def __init__(self, address: str, cases: Sequence[Case], catalog: Sequence[str]) -> None:
        try:
            self.ray: Any = importlib.import_module("ray")
        except ImportError:
            raise RayUnavailable(
                "Ray is not installed: install it beside gpucarve (pip install 'gpucarve[ray]')"
            ) from None
        _reachable(address)
        try:
            self.ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"no Ray cluster at {address!r}: {exc}") from None
        version = self.ray.get(self.ray.remote(_ray_version).remote())
        if version != gpucarve.__version__:
            self.close()
            raise RayUnavailable(
                f"the Ray cluster runs gpucarve {version}, this is {gpucarve.__version__}: "
                "install the same version on its nodes"
            )
        self.task = self.ray.remote(_ray_replay)
        self.cases = {c.key: self.ray.put(c) for c in cases}
        self.catalog = tuple(catalog)
        self.memo = _Memo()
        self.replays = 0

    def evaluate(self, jobs: Sequence[tuple[str, str]]) -> list[Figures]:
        todo = self.memo.missing(jobs)
        refs = [self.task.remote(text, self.catalog, self.cases[case]) for text, case in todo]
        for (text, case), figs in zip(todo, self.ray.get(refs), strict=True):
            self.memo.seen[self.memo.key(text, case)] = figs
        self.replays += len(todo)
        return self.memo.answer(jobs)

    def close(self) -> None:
        self.ray.shutdown()


Evaluating = InProcess | Processes | OnRay


@contextmanager
def evaluator(
    cases: Sequence[Case], catalog: Sequence[str], jobs: int, ray: str | None
) -> Iterator[Evaluating]:
    """The evaluator `--jobs` and `--ray` ask for, closed when the search is done."""
    made: Evaluating
    if ray is not None:
        made = OnRay(ray, cases, catalog)
    elif jobs > 1:
        made = Processes(cases, catalog, jobs)
    else:
        made = InProcess(cases, catalog)
    try:
        yield made
    finally:
        if not isinstance(made, InProcess):
            made.close()
