"""The ways a pod could reach a GPU, or make gpucarve act, past its queue, and what admission
does about each (docs/kubernetes.md, "Threat model"). Pure: a pod in, problems or patches out.

- `spec.nodeName` at creation skips every scheduler: refused for a pod that asks for a GPU,
  and for any pod that names gpucarve as its scheduler (only gpucarve binds those).
- Another scheduler for a pod that asks for a GPU would place it outside the queue: refused.
- A privileged container sees every device of its node, and a host path under /dev hands
  device nodes in (judged after normalisation: `//dev`, `/./dev` and `/` too): refused in a
  governed namespace, whatever the pod asks. So is a mount at the toolkit's device-list
  directory (`/var/run/nvidia-container-devices`), where a runtime that accepts lists as
  mounts reads which GPUs to give. Debug (ephemeral) containers are held to the same rules.
- The NVIDIA container toolkit gives a container the GPUs `NVIDIA_VISIBLE_DEVICES` names, and
  the kubelet puts the pod's own environment after the device plugin's, so the pod's wins.
  Set in `env` it is refused (`admission.device_env_problems`). Through `envFrom` (a ConfigMap
  or Secret whose content admission cannot see, and which can change after admission):
  a container that gets no GPU is given an explicit `NVIDIA_VISIBLE_DEVICES=void` (an
  explicit entry wins over `envFrom` and over the image's own, which every CUDA base image
  sets to `all`; `void` means no GPU to the toolkit, whatever runtime class runs the pod);
  a container that
  gets GPUs from the device plugin may use `envFrom` only with a prefix that cannot form the
  variable's name; a fraction's containers must take gpucarve's device ConfigMap last, so its
  value wins.
- Annotations that make the scheduler act (`SCHEDULER_OWNED_ANNOTATIONS`) are gpucarve's: a
  tenant's are removed at creation (the device ConfigMap's name is kept only for a pod whose
  GPU comes through it), and a change to them on update is refused, as is a change to a
  bound pod's queue label (the scheduler charges a bound pod to the queue it was admitted
  under, recorded in its assignment).
- CDI annotations (`cdi.k8s.io/…`) ask the runtime for devices by name: refused.
- gpucarve's device ConfigMaps (a fraction's variable) are written only by the scheduler and
  the control plane (`device_config_problems`); their names have gpucarve's shape.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from gpucarve.core.problems import Problem
from gpucarve.core.vocabulary import (
    ASSIGNMENT_ANNOTATION,
    DEVICE_CONFIG_ANNOTATION,
    QUEUE_LABELS,
    SCHEDULER_OWNED_ANNOTATIONS,
)

DEFAULT_SCHEDULER = "default-scheduler"
# what the NVIDIA container toolkit reads to choose a container's devices
DEVICE_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES")
# the toolkit's value for "no GPU" (as if unset): harmless whoever sets it
NO_DEVICES = "void"
POD_KINDS = ("initContainers", "containers", "ephemeralContainers")
EPHEMERAL = ("ephemeralContainers",)
# pod annotations by which a runtime is asked for CDI devices directly
CDI_PREFIX = "cdi.k8s.io/"
# where the toolkit reads a device list from mounts (the device plugin's `volume-mounts`
# strategy): a mount there names devices as the variable does, and a runtime set to accept
# such lists honours any; the plugin adds its own at start, never through the pod's spec
DEVICE_LIST_DIRS = ("/var/run/nvidia-container-devices", "/run/nvidia-container-devices")

Obj = Mapping[str, Any]


def _name(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "pod")


def containers(spec: Obj, kinds: tuple[str, ...] = POD_KINDS) -> list[tuple[str, int, Obj]]:
    out = []
    for kind in kinds:
        for i, c in enumerate(spec.get(kind) or []):
            if isinstance(c, Mapping):
                out.append((kind, i, c))
    return out


def asks_device(c: Obj) -> bool:
    """The container requests a device-plugin resource (`nvidia.com/*`)."""
    res = c.get("resources") or {}
    return any(
        str(n).startswith("nvidia.com/") for kind in ("requests", "limits")
        for n in (res.get(kind) or {})
    )  # fmt: skip


def _where(pod: Obj, *path: str) -> tuple[str, ...]:
    return (_name(pod), *path)


def placement_problems(pod: Obj, scheduler_name: str, wants_gpu: bool) -> list[Problem]:
    """A pod that would be placed by something other than gpucarve's queue."""
    spec = pod.get("spec") or {}
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    out: list[Problem] = []
    if spec.get("nodeName") and (wants_gpu or scheduler == scheduler_name):
        out.append(Problem(_where(pod, "spec", "nodeName"), "node-name-set",
                           f"nodeName {spec['nodeName']!r} places the pod without a scheduler, "
                           "outside its queue's quota",
                           "remove nodeName; to pin the pod to that node use nodeSelector "
                           f"kubernetes.io/hostname: {spec['nodeName']}"))  # fmt: skip
    if wants_gpu and scheduler not in (DEFAULT_SCHEDULER, scheduler_name):
        out.append(Problem(_where(pod, "spec", "schedulerName"), "other-scheduler",
                           f"schedulerName {scheduler!r}: a pod that asks for a GPU in a "
                           f"governed namespace is placed by {scheduler_name}",
                           f"remove schedulerName (or set {scheduler_name})"))  # fmt: skip
    return out


def device_access_problems(pod: Obj) -> list[Problem]:
    """Containers that would see devices no scheduler gave them."""
    spec = pod.get("spec") or {}
    out: list[Problem] = []
    for kind, i, c in containers(spec):
        ctx = c.get("securityContext") or {}
        if isinstance(ctx, Mapping) and ctx.get("privileged") is True:
            out.append(Problem(_where(pod, "spec", kind, str(c.get("name", i)),
                                      "securityContext", "privileged"), "privileged",
                               "a privileged container sees every GPU of its node",
                               "remove privileged: true (GPUs come from requests; for tools "
                               "that need more, run them in a namespace gpucarve does not "
                               "govern)"))  # fmt: skip
    out += _device_list_mounts(pod)
    for i, vol in enumerate(spec.get("volumes") or []):
        host = (vol.get("hostPath") or {}) if isinstance(vol, Mapping) else {}
        path = str(host.get("path") or "") if isinstance(host, Mapping) else ""
        if path and reaches_devices(path):
            out.append(Problem(_where(pod, "spec", "volumes", str(vol.get("name", i)),
                                      "hostPath", "path"), "device-host-path",
                               f"hostPath {path!r} hands the node's device files in",
                               "remove the volume: GPUs come from requests"))  # fmt: skip
    return out


def _device_list_mounts(pod: Obj) -> list[Problem]:
    out: list[Problem] = []
    for kind, i, c in containers(pod.get("spec") or {}):
        for m in c.get("volumeMounts") or []:
            path = str(m.get("mountPath") or "") if isinstance(m, Mapping) else ""
            if not path or not names_devices(path):
                continue
            out.append(Problem(_where(pod, "spec", kind, str(c.get("name", i)), "volumeMounts",
                                      str(m.get("name", path)), "mountPath"),
                               "device-list-mount",
                               f"mountPath {path!r} is where the NVIDIA runtime reads a list of "
                               "devices to give the container",
                               "mount the volume elsewhere: GPUs come from requests"))  # fmt: skip
    return out


def names_devices(mount_path: str) -> bool:
    """Whether a container path, normalised, is the toolkit's device-list directory or under it."""
    norm = posixpath.normpath("/" + mount_path.lstrip("/"))
    return any(norm == d or norm.startswith(d + "/") for d in DEVICE_LIST_DIRS)


def reaches_devices(path: str) -> bool:
    """Whether a host path, as the kubelet resolves it (`//dev`, `/./dev`, `/x/../dev` are
    /dev), is the node's /dev, a path under it, or the root that holds it."""
    norm = posixpath.normpath("/" + path.lstrip("/"))
    return norm in ("/", "/dev") or norm.startswith("/dev/")


def _prefix_safe(entry: Obj) -> bool:
    prefix = str(entry.get("prefix") or "")
    return bool(prefix) and not any(var.startswith(prefix) for var in DEVICE_ENV)


def env_from_problems(pod: Obj, own_config: str | None) -> list[Problem]:
    """`envFrom` that could set the device variables where gpucarve cannot override them:
    in a container the device plugin gives GPUs, and in a fraction's containers unless
    gpucarve's ConfigMap comes last."""
    spec = pod.get("spec") or {}
    out: list[Problem] = []
    for kind, i, c in containers(spec, ("initContainers", "containers")):
        sources = [e for e in c.get("envFrom") or [] if isinstance(e, Mapping)]
        where = _where(pod, "spec", kind, str(c.get("name", i)), "envFrom")
        if asks_device(c):
            bad = [e for e in sources if not _prefix_safe(e)]
            if bad:
                out.append(Problem(where, "device-env-from",
                                   "envFrom without a prefix may set NVIDIA_VISIBLE_DEVICES, "
                                   "which the container toolkit honours over the GPUs the "
                                   "device plugin chose (admission cannot see what the "
                                   "ConfigMap or Secret holds, and it can change later)",
                                   "give each envFrom a prefix (e.g. prefix: APP_), or list the "
                                   "keys you need under env with valueFrom"))  # fmt: skip
        elif own_config is not None and kind == "containers":
            last = sources[-1] if sources else {}
            ref = last.get("configMapRef") or {}
            if not (isinstance(ref, Mapping) and ref.get("name") == own_config):
                out.append(Problem(where, "device-config-not-last",
                                   f"the fraction's GPU comes from ConfigMap {own_config}, "
                                   "which must be the last envFrom so no other source "
                                   "overrides it",
                                   f"put configMapRef {own_config} last (the webhook adds it "
                                   "there)"))  # fmt: skip
    return out


def device_config_name(review_uid: str) -> str:
    """The device ConfigMap of a fraction-only pod: named from its admission request's uid
    (the pod has neither name nor uid yet when it is made from a generateName)."""
    return f"gpucarve-gpu-{review_uid.lower()}"[:253]


# the names `device_config_name` gives; each webhook call of one request has a uid of its own,
# so validation knows the shape, not the name. Another pod's ConfigMap of this shape is
# gpucarve's for that pod, which the scheduler never writes for this one.
DEVICE_CONFIG_NAME = re.compile(r"gpucarve-gpu-[0-9a-z][0-9a-z-]*")


def _own_device_config(annotations: Obj, fraction_only: bool) -> bool:
    """The device ConfigMap a fraction names is one gpucarve names (a tenant's name,
    `kube-root-ca.crt` say, would have the scheduler fail to write it and try again). A name
    of that shape taken by another pod's ConfigMap is no way around either: the scheduler
    writes only a ConfigMap that is its own for this very pod, else the binding fails."""
    named = annotations.get(DEVICE_CONFIG_ANNOTATION)
    return (
        fraction_only and isinstance(named, str) and DEVICE_CONFIG_NAME.fullmatch(named) is not None
    )


def owned_annotation_problems(pod: Obj, fraction_only: bool) -> list[Problem]:
    """Scheduler-owned annotations a pod may not carry at creation (the mutating webhook
    removes them; this catches a pod that reached validation without it)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    out: list[Problem] = []
    for key in SCHEDULER_OWNED_ANNOTATIONS:
        if key not in annotations:
            continue
        if key == DEVICE_CONFIG_ANNOTATION and _own_device_config(annotations, fraction_only):
            continue  # the fraction's own ConfigMap (env_from_problems checks its use)
        out.append(Problem(_where(pod, "metadata", "annotations", key), "scheduler-owned",
                           f"{key} is set by gpucarve only: the scheduler acts on it",
                           "remove the annotation"))  # fmt: skip
    return out


def owned_changes(old: Obj, new: Obj) -> list[Problem]:
    """An update that changes a scheduler-owned annotation (nothing of gpucarve's updates
    pods: the scheduler writes the assignment through the binding), or the queue label of a
    bound pod (it is charged to the queue it was admitted under)."""
    before = (old.get("metadata") or {}).get("annotations") or {}
    after = (new.get("metadata") or {}).get("annotations") or {}
    out = [
        Problem(_where(new, "metadata", "annotations", key), "scheduler-owned",
                f"{key} is set by gpucarve only: it may not change after creation",
                f"keep its value ({before.get(key, 'unset')!r})")
        for key in SCHEDULER_OWNED_ANNOTATIONS
        if before.get(key) != after.get(key)
    ]  # fmt: skip
    if not (old.get("spec") or {}).get("nodeName"):
        return out
    was = (old.get("metadata") or {}).get("labels") or {}
    now = (new.get("metadata") or {}).get("labels") or {}
    return out + [
        Problem(_where(new, "metadata", "labels", key), "queue-of-bound-pod",
                f"{key} names the queue a running pod is charged to: it may not change once "
                "the pod is bound", f"keep its value ({was.get(key, 'unset')!r}); a new queue "
                "takes a new pod")
        for key in QUEUE_LABELS
        if was.get(key) != now.get(key)
    ]  # fmt: skip


def strip_owned(pod: Obj, fraction_only: bool) -> list[str]:
    """The scheduler-owned annotations the mutating webhook removes from a new pod: all of
    them, but a device ConfigMap's name of gpucarve's shape on a fraction-only pod (it may be
    gpucarve's own, from an earlier invocation of the same admission)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    own = _own_device_config(annotations, fraction_only)
    keep = {DEVICE_CONFIG_ANNOTATION} if own else set()
    return [
        k for k in (ASSIGNMENT_ANNOTATION, DEVICE_CONFIG_ANNOTATION)
        if k in annotations and k not in keep
    ]  # fmt: skip


def gets_gpu(c: Obj) -> bool:
    """The container is given GPUs: device-plugin resources, or ResourceClaims (the DRA
    driver's devices)."""
    return asks_device(c) or bool((c.get("resources") or {}).get("claims"))


def needs_void(pod: Obj, fraction_only: bool, old: Obj | None = None) -> list[tuple[str, int]]:
    """Containers that get no GPU and do not set the variable themselves: each gets
    `NVIDIA_VISIBLE_DEVICES=void`, which wins over `envFrom` and over what the image sets (a
    CUDA base image sets it to `all`, which the NVIDIA runtime would honour). A fraction's
    containers get theirs through gpucarve's ConfigMap, last in envFrom. With `old` (an
    update adding debug containers), only the ephemeral containers it adds."""
    spec = pod.get("spec") or {}
    if old is not None:
        had = {c.get("name") for _, _, c in containers((old.get("spec") or {}), EPHEMERAL)}
        found = [(k, i, c) for k, i, c in containers(spec, EPHEMERAL) if c.get("name") not in had]
    else:
        found = containers(spec, ("initContainers", "containers"))
    out = []
    for kind, i, c in found:
        if gets_gpu(c) or (fraction_only and kind == "containers"):
            continue
        names = {e.get("name") for e in c.get("env") or [] if isinstance(e, Mapping)}
        if DEVICE_ENV[0] not in names:
            out.append((kind, i))
    return out


def cdi_problems(pod: Obj) -> list[Problem]:
    """Annotations that ask the container runtime for devices by CDI name, past any scheduler
    (`cdi.k8s.io/<name>: nvidia.com/gpu=all`)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return [
        Problem(_where(pod, "metadata", "annotations", key), "cdi-annotation",
                f"{key} asks the container runtime for devices by name, outside the scheduler",
                "remove it: request GPUs as resources, a fraction or a ResourceClaim")
        for key in sorted(annotations)
        if str(key).startswith(CDI_PREFIX)
    ]  # fmt: skip


def unneutralised_problems(pod: Obj, fraction_only: bool, old: Obj | None = None) -> list[Problem]:
    """Containers `needs_void` names that reached validation without the explicit variable
    (the mutating webhook did not run on them)."""
    spec = pod.get("spec") or {}
    return [
        Problem(_where(pod, "spec", kind, str(spec[kind][i].get("name", i)), "env"),
                "device-env-from" if spec[kind][i].get("envFrom") else "device-env-unset",
                "a container that gets no GPU must say so: its image may set "
                "NVIDIA_VISIBLE_DEVICES (every CUDA base image does), and envFrom may too",
                f"add env {DEVICE_ENV[0]}={NO_DEVICES} (gpucarve's mutating webhook does)")
        for kind, i in needs_void(pod, fraction_only, old)
    ]  # fmt: skip


# Who besides the scheduler may write or delete a device ConfigMap: cluster administrators,
# and the control plane's controllers (the garbage collector deletes one with its pod, the
# namespace controller with its namespace), whether they run under their own service accounts
# or kube-controller-manager's user.
TRUSTED_GROUPS = ("system:masters",)
TRUSTED_USERS = ("system:kube-controller-manager",)
CONTROLLERS_PREFIX = "system:serviceaccount:kube-system:"


def device_config_problems(req: Obj, writers: frozenset[str]) -> list[Problem]:
    """A write or deletion of gpucarve's device ConfigMap (the one a fraction's containers take
    `NVIDIA_VISIBLE_DEVICES` from) by anyone but the scheduler (`writers`) and the control
    plane: a tenant who may edit ConfigMaps in the namespace would otherwise give the pod's
    next container start every GPU of its node."""
    user = req.get("userInfo") or {}
    name = str(user.get("username") or "")
    groups = user.get("groups") or []
    if (name in writers or name in TRUSTED_USERS or name.startswith(CONTROLLERS_PREFIX)
            or any(g in TRUSTED_GROUPS for g in groups)):  # fmt: skip
        return []
    obj = req.get("object") or req.get("oldObject") or {}
    meta = obj.get("metadata") or {}
    what = f"ConfigMap {meta.get('namespace') or req.get('namespace')}/{meta.get('name')}"
    verb = str(req.get("operation") or "write").lower()
    return [Problem((str(meta.get("name") or "configmap"), "metadata", "labels"),
                    "device-config-owned",
                    f"{what} is gpucarve's device configuration (it chooses a fraction's GPU): "
                    f"{name or 'this user'} may not {verb} it",
                    "leave it to gpucarve's scheduler: it is written at binding and deleted "
                    "with its pod")]  # fmt: skip
