"""`gpucarve history`: a cluster's own recorded history, exported as a trace and replayed."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import CatalogOption, fail, policy_file, policy_or_exit, text_out
from gpucarve.cli.kube_options import client_or_exit
from gpucarve.cli.output import console, refuse
from gpucarve.config.policy_build import LoadedPolicy
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.history.export import jsonl, rebased, since_seconds
from gpucarve.sim.history.gain import gain, predicted, recorded, simulated
from gpucarve.sim.history.replay import Fidelity, replay, scheduler_policy
from gpucarve.sim.history.store import HistoryStore
from gpucarve.sim.run.baselines import POLICIES
from gpucarve.sim.traces.trace_io import LoadedTrace, load_trace

app = typer.Typer(
    rich_markup_mode=None,
    help="A cluster's recorded history: export it as a trace, replay it in the simulator.",
    no_args_is_help=True,
)
MAX_FEED_BYTES = 1024 * 1024 * 1024


def _since(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(time.time()) - since_seconds(text)
    except ValueError as exc:
        refuse("--since", "bad-duration", str(exc), "write a number and a unit: s, m, h or d")


def _bearer(kubeconfig: Path | None, token_file: Path | None) -> str | None:
    """The Authorization header /history is asked with: the token in `token_file`, or the
    kubeconfig user's (None: neither given)."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            refuse("--token-file", "cannot-read", f"{token_file}: {exc.strerror}",
                   "give a file holding a token (kubectl create token NAME > FILE)")  # fmt: skip
        if not token:
            refuse("--token-file", "empty", f"{token_file} holds no token",
                   "write a token into it (kubectl create token NAME > FILE)")  # fmt: skip
        return f"Bearer {token}"
    if kubeconfig is None:
        return None
    header = client_or_exit(kubeconfig).credentials
    said = header.authorization() if header is not None else None
    if not said:
        refuse("--kubeconfig", "no-token", f"{kubeconfig}'s user signs in with a certificate, "
               "which /history cannot review", "give --token-file with a token "
               "(kubectl create token NAME > FILE)")  # fmt: skip
    return said


def _from_url(url: str, since: int | None, authorization: str | None) -> list[dict[str, Any]]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        fix = "give the scheduler's --health-port address, e.g. http://127.0.0.1:10259"
        refuse("--url", "bad-url", f"{url!a} is not an http(s) address", fix)
    target = url.rstrip("/") + "/history" + (f"?since={since}" if since is not None else "")
    request = urllib.request.Request(target)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            body = reply.read(MAX_FEED_BYTES + 1)
    except urllib.error.HTTPError as exc:
        said = exc.read(4096).decode("utf-8", errors="replace")
        if exc.code in (401, 403):
            refuse("--url", "not-allowed", f"{target} refused the request ({exc.code}): {said}",
                   "give --kubeconfig or --token-file for a user who may list nodes (every "
                   "workload) or pods in the namespaces to export")  # fmt: skip
        refuse("--url", "refused", f"{target} answered {exc.code}: {said}",
               "check the scheduler's log")  # fmt: skip
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        refuse("--url", "unreachable", f"{target} did not answer: {reason}",
               "check that the scheduler runs with --history-dir and --health-port")  # fmt: skip
    if len(body) > MAX_FEED_BYTES:
        refuse("--url", "too-large", "the history is over 1 GiB", "export a shorter --since")
    lines = []
    for raw in body.decode("utf-8", errors="replace").splitlines():
        try:
            found = json.loads(raw)
        except ValueError:
            continue
        if isinstance(found, dict):
            lines.append(found)
    return lines


@app.command("export")
def export(
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="The scheduler's --history-dir (its mounted volume)."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="The scheduler's --health-port address (e.g. through kubectl port-forward): "
            "its /history, with the workloads still running.",
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            help="With --url: ask as this kubeconfig's user (its bearer token; the scheduler "
            "reviews it with the API server: --history-auth kube).",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="With --url: ask with the bearer token in this file."),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Workloads that ended this long ago or later.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the trace here (default: standard output).")
    ] = None,
) -> None:
    """Export the recorded history as a JSONL trace that `history replay` and
    `simulate --trace` read: times in seconds from the first arrival."""
    if (folder is None) == (url is None):
        refuse("--dir/--url", "one-source", "give the history's folder or the scheduler's address",
               "pass exactly one of --dir or --url")  # fmt: skip
    if url is None and (kubeconfig is not None or token_file is not None):
        refuse("--kubeconfig/--token-file", "needs-url", "credentials are for the scheduler's "
               "/history", "add --url, or leave them out with --dir")  # fmt: skip
    if kubeconfig is not None and token_file is not None:
        refuse("--kubeconfig/--token-file", "one-credential", "both give a token",
               "pass one of them")  # fmt: skip
    cut = _since(since)
    if folder is not None:
        if not folder.is_dir():
            refuse("--dir", "no-folder", f"{folder} is not a folder", "give the --history-dir")
        lines = list(HistoryStore(folder).lines(cut))
    else:
        assert url is not None
        lines = _from_url(url, cut, _bearer(kubeconfig, token_file))
    if text_out(out, jsonl(rebased(lines))):
        console(stderr=True).print(Text(f"wrote {len(lines)} workloads to {out}"))


def _print(fid: Fidelity) -> None:
    doc = fid.as_doc(top=10)
    c = console()
    c.print(Text(f"replayed under {fid.policy}: {doc['compared']} workloads compared"))
    for label, key in (
        ("median |simulated − recorded start|", "median_abs_s"),
        ("p95", "p95_abs_s"),
        ("max", "max_abs_s"),
    ):
        c.print(Text(f"  {label}: {doc[key]} s"))
    mean = fid.mean_signed()
    if mean is not None:
        late = "later" if mean > 0 else "earlier"
        c.print(Text(f"  on average the replay starts work {abs(mean):.1f} s {late}"))
    if fid.not_simulated:
        c.print(
            Text(f"  {fid.not_simulated} workloads the cluster started never start in the replay")
        )
    if fid.never_recorded:
        c.print(
            Text(
                f"  {fid.never_recorded} workloads never started on the cluster "
                "(replayed, not compared)"
            )
        )
    table = Table("workload", "recorded start (s)", "simulated start (s)", title="furthest apart")
    for row in doc["worst"]:  # type: ignore[attr-defined]
        table.add_row(str(row["workload"]), str(row["recorded_s"]), str(row["simulated_s"]))
    c.print(table)


@app.command("replay")
def replay_cmd(
    trace: Annotated[
        Path, typer.Argument(metavar="HISTORY", help="A history `history export` wrote.")
    ],
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The policy the cluster ran (default: the example)."),
    ] = None,
    as_policy: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="The simulator's policy to replay under: gpucarve or kube-default (default: "
            "gpucarve where gpucarve bound every recorded start, else kube-default).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    catalog: CatalogOption = None,
) -> None:
    """Replay a recorded history in the simulator and compare each workload's simulated start
    with the one recorded."""
    loaded = policy_or_exit(policy_file(policy), catalog)
    if as_policy is not None and as_policy not in ("gpucarve", "kube-default"):
        refuse("--as", "unknown-policy", f"no replay policy {as_policy!a}",
               "use gpucarve or kube-default")  # fmt: skip
    history = _history(trace, loaded)
    name = as_policy or scheduler_policy(history)
    assert name in POLICIES
    _, fid = replay(loaded.policy, history, name)
    if as_json:
        typer.echo(json.dumps(fid.as_doc(), indent=2, sort_keys=True))
        return
    _print(fid)


def _history(path: Path, policy: LoadedPolicy) -> LoadedTrace:
    try:
        history = load_trace(path, policy.policy)
    except InvalidInput as exc:
        fail(exc)
    if not history.recorded:
        fix = "export one with `gpucarve history export`; `simulate --trace` replays plain traces"
        refuse("HISTORY", "not-a-history", f"{path} has no recorded starts", fix)
    return history


def _forecast(path: Path | None) -> dict[str, float] | None:
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        refuse("--predicted", "unreadable", f"{path}: {exc}",
               "give the results.json `simulate --recommend --out DIR` wrote")  # fmt: skip
    said = predicted(doc) if isinstance(doc, dict) else None
    if said is None:
        refuse("--predicted", "no-recommendation", f"{path} holds no recommendation",
               "give the results.json of a `simulate --recommend` run")  # fmt: skip
    return said


@app.command("gain")
def gain_cmd(
    trace: Annotated[
        Path,
        typer.Argument(metavar="HISTORY", help="A history recorded since the new policy went out."),
    ],
    before: Annotated[
        Path, typer.Option("--before", help="The policy the cluster ran before (the old one).")
    ],
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The policy the history was recorded under (the new one)."),
    ] = None,
    forecast: Annotated[
        Path | None,
        typer.Option(
            "--predicted",
            help="The results.json of the `simulate --recommend` run that chose the new policy: "
            "its predicted change of each queue's wait p95, beside the one seen.",
        ),
    ] = None,
    as_policy: Annotated[
        str | None,
        typer.Option("--as", help="The simulator's policy to replay under (as history replay)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    catalog: CatalogOption = None,
) -> None:
    """The gain a policy change brought, seen on the history recorded after it: replayed under
    the old policy and the new, against what the cluster did and what was predicted."""
    new = policy_or_exit(policy_file(policy), catalog)
    old = policy_or_exit(before, catalog)
    if as_policy is not None and as_policy not in ("gpucarve", "kube-default"):
        refuse("--as", "unknown-policy", f"no replay policy {as_policy!a}",
               "use gpucarve or kube-default")  # fmt: skip
    said = _forecast(forecast)
    seen_history, old_history = _history(trace, new), _history(trace, old)
    name = as_policy or scheduler_policy(seen_history)
    new_run, _ = replay(new.policy, seen_history, name)
    old_run, _ = replay(old.policy, old_history, name)
    rows = gain(recorded(seen_history), simulated(old_history, old_run),
                simulated(seen_history, new_run), said)  # fmt: skip
    if as_json:
        typer.echo(json.dumps({"replayed_as": name, "queues": rows}, indent=2, sort_keys=True))
        return
    table = Table(title=f"Wait p95 by queue (hours; replayed as {name}): seen against predicted")
    for col in ("queue", "recorded", "old policy", "new policy", "seen change",
                "replayed change", "predicted change", "stopped runs (rec/old/new)"):  # fmt: skip
        table.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        table.add_row(
            r["queue"],
            *(_h(r[k], "") for k in ABSOLUTE),
            *(_h(r[k], "+") for k in CHANGES),
            f"{r['recorded_stops']}/{r['old_policy_stops']}/{r['new_policy_stops']}",
        )
    console().print(table)


ABSOLUTE = ("recorded_wait_p95_h", "old_policy_wait_p95_h", "new_policy_wait_p95_h")
CHANGES = ("seen_change_h", "replayed_change_h", "predicted_change_h")


def _h(value: float | None, sign: str) -> str:
    return "-" if value is None else format(value, f"{sign}.2f")
