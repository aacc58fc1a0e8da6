"""The scheduler as observe -> decide -> react: its cycle wires no duty by hand, and each
reaction to a cycle is one entry of the list it is configured with."""

from __future__ import annotations

import ast
import inspect

from gpucarve.kube.scheduler import loop
from gpucarve.kube.scheduler.reactions import (
    REACTIONS,
    Bind,
    Evict,
    LogLine,
    Metrics,
    Reasons,
    Repartition,
    Tell,
)


def _cycle() -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(loop))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "cycle")


def test_the_cycle_calls_observe_decide_and_the_reactions_and_nothing_else() -> None:
    calls = {ast.unparse(n.func) for n in ast.walk(_cycle()) if isinstance(n, ast.Call)}
    assert calls == {"self.observe", "self.decide", "reaction.react"}
    loops = [n for n in ast.walk(_cycle()) if isinstance(n, ast.For)]
    assert [ast.unparse(n.iter) for n in loops] == ["self.reactions"]


def test_evictions_come_before_bindings_and_the_reasons_after_both() -> None:
    kinds = [type(r) for r in REACTIONS]
    assert kinds.index(Evict) < kinds.index(Bind) < kinds.index(Reasons)
    # the observers and the log are told what was acted on: after every action
    for last in (Tell, LogLine):
        assert kinds.index(last) > max(kinds.index(k) for k in (Bind, Evict, Repartition))
    assert Metrics in kinds and len(set(kinds)) == len(kinds)
