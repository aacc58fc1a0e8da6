"""Every cluster the tests, the benches and `dev-cluster up` start is the stack as shipped
(`devcluster/stack.py`: kwok, the controllers, kube-scheduler, gpucarve's webhook with the
chart's configurations), or says why a part is off. Read from the source, so a new scenario
that switches the webhook off without a reason fails here before it runs; the list of those
that do is printed (`pytest -s`) and kept in the failure message."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from gpucarve.devcluster.stack import PARTS

ROOT = Path(__file__).resolve().parents[3]
# `dev-cluster up` switches parts off by the user's flags (`--no-webhook`): its reasons are
# those flags, not literals
USER_FLAGS = ROOT / "src/gpucarve/cli/devcluster_cmd.py"


@dataclass(frozen=True)
class Site:
    where: str
    policy: bool
    off: dict[str, str] | None  # None: not readable from the source


def _dict_of(node: ast.AST | None, names: dict[str, ast.AST]) -> dict[str, str] | None:
    """A dict literal (or `dict.fromkeys(PARTS, …)`: every part) of string reasons,
    following one name to its assignment."""
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    if isinstance(node, ast.Dict):
        out: dict[str, str] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                return None
            out[k.value] = _text(v)
        return out
    if (isinstance(node, ast.Call) and ast.unparse(node.func) == "dict.fromkeys"
            and len(node.args) == 2 and ast.unparse(node.args[0]) == "PARTS"):  # fmt: skip
        return dict.fromkeys(PARTS, _text(node.args[1]))
    return None


def _text(node: ast.AST) -> str:
    """A reason written as a string literal (implicitly joined or not); '' otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""


def _assignments(tree: ast.AST) -> dict[str, ast.AST]:
    """name -> the value last assigned to it (dict displays and `off["x"] = "…"` items)."""
    names: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                names[target.id] = node.value
            elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                  and isinstance(names.get(target.value.id), ast.Dict)):  # fmt: skip
                held = names[target.value.id]
                assert isinstance(held, ast.Dict)
                held.keys.append(target.slice)
                held.values.append(node.value)
    return names


def sites() -> list[Site]:
    out = []
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("src/**/*.py")]
    for path in sorted(files):
        tree = ast.parse(path.read_text(), str(path))
        names = _assignments(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name != "LocalStack":
                continue
            kw = {k.arg: k.value for k in node.keywords}
            policy = len(node.args) >= 3 or "policy" in kw
            off_node = node.args[3] if len(node.args) >= 4 else kw.get("off")
            off = {} if off_node is None else _dict_of(off_node, names)
            out.append(Site(f"{path.relative_to(ROOT)}:{node.lineno}", policy, off))
    return out


def test_every_stack_is_the_shipped_one_or_says_why_a_part_is_off() -> None:
    found = sites()
    assert len(found) > 20, "the scan found the stacks the integration tests start"
    bad = []
    listed = []
    for s in found:
        if s.where.startswith(str(USER_FLAGS.relative_to(ROOT))):
            continue
        if s.off is None:
            bad.append(f"{s.where}: off= is not a dict of string reasons this test can read")
            continue
        for part, why in sorted(s.off.items()):
            if part not in PARTS or not why.strip():
                bad.append(f"{s.where}: {part} off without a reason")
            else:
                listed.append(f"{s.where}: {part} off: {why}")
        if not s.policy and "webhook" not in s.off:
            bad.append(f"{s.where}: no policy, so no webhook, and no reason given")
    report = "\n".join(listed)
    print("\nstacks that switch a part off:\n" + report)
    assert not bad, "\n".join(bad) + "\n\nthose with reasons:\n" + report
    # the shipped stack is the rule: most scenarios switch nothing off
    shipped = [s for s in found if s.policy and not s.off]
    assert len(shipped) > len(found) // 2, report


def bypasses() -> list[tuple[str, str]]:
    """Each scenario that takes the webhook away for a while (`stack_setup.webhook_bypassed`),
    with its reason."""
    out = []
    for path in sorted(ROOT.glob("tests/**/*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = _assignments(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "webhook_bypassed"):  # fmt: skip
                why = node.args[2] if len(node.args) > 2 else None
                if isinstance(why, ast.Name):
                    why = names.get(why.id)
                out.append((f"{path.relative_to(ROOT)}:{node.lineno}", _text(why) if why else ""))
    return out


def test_every_scenario_that_bypasses_the_webhook_says_why() -> None:
    found = bypasses()
    assert found, "the scan finds the scenarios of what gets past admission"
    report = "\n".join(f"{where}: {why or '(no reason)'}" for where, why in found)
    print("\nscenarios that take the webhook away for a while:\n" + report)
    assert all(why.strip() for _, why in found), report


def test_a_reason_that_is_no_literal_is_caught() -> None:
    code = "LocalStack(b, w, off={'webhook': why})\nLocalStack(b, w, off={'webhook': ''})\n"
    tree = ast.parse(code)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    reasons = [_dict_of(c.keywords[0].value, {}) for c in calls]
    assert reasons == [{"webhook": ""}, {"webhook": ""}]
