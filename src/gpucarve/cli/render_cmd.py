"""`gpucarve render`: configuration files of the NVIDIA stack, from the policy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.output import Exit, console
from gpucarve.render import dra, nvidia
from gpucarve.render.autoscaling import adapter_config_map, adapter_rules, hpa
from gpucarve.render.migparted import mig_parted_config
from gpucarve.render.migparted import node_labels as mig_labels
from gpucarve.render.monitoring import grafana_dashboard, prometheus_rule
from gpucarve.render.namespaces import namespace_objects, split_warnings
from gpucarve.render.yaml_out import dump

app = typer.Typer(
    rich_markup_mode=None,
    help="Render the NVIDIA stack's configuration from a policy.",
    no_args_is_help=True,
)
PolicyOption = Annotated[Path, typer.Option("--policy", help="Policy YAML file.")]


def _k8s_name(value: str) -> str:
    """A Kubernetes object or namespace name (DNS-1123), or a usage error naming the fix."""
    if not _NAME.match(value) or len(value) > 63:
        raise typer.BadParameter(
            f"{value!a} is no Kubernetes name; fix: lowercase letters, digits and '-', at most "
            "63, starting and ending with a letter or digit"
        )
    return value


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NamespaceOption = Annotated[
    str,
    typer.Option("--namespace", help="The GPU Operator's namespace.", callback=_k8s_name),
]
NameOption = Annotated[
    str, typer.Option("--name", help="The ConfigMap's name.", callback=_k8s_name)
]


def _echo_objects(objs: list[dict[str, Any]]) -> None:
    """Kubernetes objects as one multi-document YAML stream, for `kubectl apply -f -`."""
    typer.echo("".join("---\n" + dump(o) for o in objs), nl=False)


def _label_header(labels: dict[str, dict[str, str]]) -> str:
    return "".join(
        f"# pool {pool}: label its nodes {k}={v}\n"
        for pool, pair in sorted(labels.items())
        for k, v in sorted(pair.items())
    )


@app.command("mig-config")
def mig_config(
    policy: PolicyOption,
    config_map: Annotated[
        bool,
        typer.Option(
            "--config-map",
            help="As the ConfigMap the MIG manager reads (key config.yaml), not the bare file.",
        ),
    ] = False,
    namespace: NamespaceOption = "gpu-operator",
    name: NameOption = (nvidia.MIG_CONFIG_MAP),
    catalog: CatalogOption = None,
) -> None:
    """The mig-parted configuration (for the MIG manager's ConfigMap) of the policy's static
    layouts: one `gpucarve-<pool>` configuration per pool on a MIG-capable model."""
    loaded = policy_or_exit(policy, catalog)
    doc = mig_parted_config(loaded.policy)
    text = yaml.safe_dump(doc, sort_keys=False)
    if config_map:
        text = dump(nvidia.config_map(name, namespace, {"config.yaml": text}))
    typer.echo(_label_header(mig_labels(loaded.policy)) + text, nl=False)


@app.command("device-plugin")
def device_plugin(
    policy: PolicyOption,
    namespace: NamespaceOption = "gpu-operator",
    name: NameOption = (nvidia.DEVICE_PLUGIN_CONFIG_MAP),
    catalog: CatalogOption = None,
) -> None:
    """The NVIDIA device plugin's ConfigMap: one named configuration per device-plugin pool
    (time-slicing or MPS replicas, shared GPUs renamed nvidia.com/gpu.shared, MIG strategy
    mixed) and the node label that selects each; DRA pools get none (`render dra`)."""
    loaded = policy_or_exit(policy, catalog)
    cm = nvidia.device_plugin_config_map(loaded.policy, namespace, name)
    labels = {p: {nvidia.CONFIG_LABEL: v[nvidia.CONFIG_LABEL]}
              for p, v in nvidia.node_labels(loaded.policy).items()
              if nvidia.CONFIG_LABEL in v}  # fmt: skip
    typer.echo(_label_header(labels) + dump(cm), nl=False)


@app.command("dra")
def dra_objects(policy: PolicyOption, catalog: CatalogOption = None) -> None:
    """For DRA pools (`devices: dra`): the DeviceClass their pods' ResourceClaims name, and
    the label that keeps the GPU Operator's device plugin off their nodes (NVIDIA's DRA
    driver serves their GPUs). `kubectl apply -f -` the objects."""
    loaded = policy_or_exit(policy, catalog)
    classes = dra.device_classes(loaded.policy)
    if not classes:
        err = console(stderr=True)
        err.print(Text("no pool of the policy is DRA-managed: nothing to render", style="red"))
        err.print(Text("fix: set `devices: dra` on the pools whose nodes run NVIDIA's DRA driver"))
        raise typer.Exit(Exit.INVALID)
    typer.echo(_label_header(dra.node_labels(loaded.policy)), nl=False)
    _echo_objects(classes)


@app.command("gpu-operator")
def gpu_operator(
    policy: PolicyOption,
    device_plugin_config_map: Annotated[
        str,
        typer.Option("--device-plugin-config-map", help="Name of the device plugin's ConfigMap."),
    ] = nvidia.DEVICE_PLUGIN_CONFIG_MAP,
    mig_config_map: Annotated[
        str, typer.Option("--mig-config-map", help="Name of the MIG manager's ConfigMap.")
    ] = nvidia.MIG_CONFIG_MAP,
    catalog: CatalogOption = None,
) -> None:
    """Values for the GPU Operator's Helm chart (the fields of its ClusterPolicy): the mixed
    MIG strategy, the device plugin's and the MIG manager's ConfigMaps from this policy.
    `helm upgrade gpu-operator ... -f` this file, after `render device-plugin` is applied."""
    loaded = policy_or_exit(policy, catalog)
    values = nvidia.gpu_operator_values(loaded.policy, device_plugin_config_map, mig_config_map)
    header = (
        "# GPU Operator Helm values for gpucarve; every node needs its pool's labels:\n"
        + _label_header(nvidia.node_labels(loaded.policy))
    )
    typer.echo(header + dump(values), nl=False)


@app.command("namespaces")
def namespaces(
    policy: PolicyOption,
    whole: Annotated[
        bool,
        typer.Option(
            "--whole-ceiling",
            help="Give each namespace of a queue the queue's whole ceiling instead of a share "
            "(looser backstop; no namespace is held below what the queue may use).",
        ),
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """Per namespace a queue lists, a ResourceQuota (every GPU resource of the cluster, capped
    at the namespace's share of what its queue can ever hold, 0 where it has no quota) and a
    LimitRange (one container at most the queue's maxPerWorkload), and the PriorityClasses:
    a backstop for pods that bypass gpucarve."""
    loaded = policy_or_exit(policy, catalog)
    if not whole:
        err = console(stderr=True)
        for line in split_warnings(loaded.policy):
            err.print(Text("warning: " + line, style="yellow"))
    _echo_objects(namespace_objects(loaded.policy, split=not whole))


@app.command("monitoring")
def monitoring(
    policy: PolicyOption,
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace", help="Where the PrometheusRule and dashboard go.", callback=_k8s_name
        ),
    ] = "gpucarve-system",
    dashboard_only: Annotated[
        bool, typer.Option("--dashboard", help="Print only the Grafana dashboard's JSON.")
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """The PrometheusRule (the seeds' DCGM alerts: utilisation low, memory high, temperature
    high; gpucarve's: a queue starved, a gang stuck, repartitions failing, no leader; the
    thresholds from the policy's `monitoring:`) and a Grafana dashboard in a ConfigMap that
    Grafana's sidecar loads (label grafana_dashboard=1)."""
    loaded = policy_or_exit(policy, catalog)
    board = grafana_dashboard(loaded.policy)
    if dashboard_only:
        typer.echo(json.dumps(board, indent=2))
        return
    cm = nvidia.config_map(
        "gpucarve-dashboard", namespace, {"gpucarve.json": json.dumps(board, indent=2)}
    )
    cm["metadata"]["labels"]["grafana_dashboard"] = "1"
    objs = [prometheus_rule(loaded.policy, namespace), cm]
    _echo_objects(objs)


@app.command("autoscaling")
def autoscaling(
    policy: PolicyOption,
    adapter_namespace: Annotated[
        str,
        typer.Option(
            "--adapter-namespace", help="prometheus-adapter's namespace.", callback=_k8s_name
        ),
    ] = "monitoring",
    adapter_config_map_name: Annotated[
        str, typer.Option("--adapter-config-map", help="The ConfigMap its --config reads.")
    ] = "prometheus-adapter",
    labels: Annotated[
        str,
        typer.Option(
            "--labels",
            help="How DCGM's pod labels reach Prometheus: 'pod' (namespace, pod: honorLabels) "
            "or 'exported' (exported_namespace, exported_pod).",
        ),
    ] = "pod",
    helm_values: Annotated[
        bool,
        typer.Option("--adapter-values", help="Print the adapter's Helm values (rules.custom)."),
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """Per `autoscaling:` entry of the policy, a HorizontalPodAutoscaler on its pods'
    gpu_utilization and request latency (scale-up and scale-down windows from the entry), and
    the prometheus-adapter rules that serve those metrics from DCGM and the app's histogram."""
    if labels not in ("pod", "exported"):
        console(stderr=True).print(
            Text(f"--labels {labels!r}: use 'pod' or 'exported'", style="red")
        )
        raise typer.Exit(Exit.INVALID)
    loaded = policy_or_exit(policy, catalog)
    if not loaded.policy.autoscaling:
        fix = "add `autoscaling:` entries (deployment, namespace, maxReplicas, resources)"
        console(stderr=True).print(
            Text(f"{policy}: no autoscaling entries; fix: {fix}", style="red")
        )
        raise typer.Exit(Exit.INVALID)
    exported = labels == "exported"
    if helm_values:
        typer.echo(dump({"rules": {"custom": adapter_rules(loaded.policy, exported)}}), nl=False)
        return
    objs = [hpa(a) for a in loaded.policy.autoscaling]
    objs.append(adapter_config_map(loaded.policy, adapter_namespace, adapter_config_map_name,
                                   exported))  # fmt: skip
    _echo_objects(objs)
