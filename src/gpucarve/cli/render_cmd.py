"""`gpucarve render`: configuration files of the NVIDIA stack, from the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.render.migparted import mig_parted_config, node_labels

app = typer.Typer(
    help="Render the NVIDIA stack's configuration from a policy.", no_args_is_help=True
)


@app.command("mig-config")
def mig_config(
    policy: Annotated[Path, typer.Option("--policy", help="Policy YAML file.")],
    catalog: CatalogOption = None,
) -> None:
    """The mig-parted configuration (for the MIG manager's ConfigMap) of the policy's static
    layouts: one `gpucarve-<pool>` configuration per pool on a MIG-capable model."""
    loaded = policy_or_exit(policy, catalog)
    labels = node_labels(loaded.policy)
    header = "".join(
        f"# pool {pool}: label its nodes {k}={v}\n"
        for pool, pair in sorted(labels.items())
        for k, v in pair.items()
    )
    typer.echo(header + yaml.safe_dump(mig_parted_config(loaded.policy), sort_keys=False), nl=False)
