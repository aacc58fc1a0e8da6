"""gpucarve's names on Kubernetes objects, in one place: its API group, the labels and
annotations it reads and writes, and the ecosystem's names it understands.

Every module that reads or writes one of these imports it from here, so a name is spelt once
and a reader can see everything gpucarve puts on a cluster.
"""

from __future__ import annotations

# ----------------------------------------------------------------- API group
GROUP = "gpucarve.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAMES = (f"queues.{GROUP}", f"cohorts.{GROUP}", f"podgroups.{GROUP}")

# ----------------------------------------------------------------- pods: what users write
QUEUE_LABEL = f"{GROUP}/queue"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
FRACTION_ANNOTATION = f"{GROUP}/gpu-fraction"  # milli-GPU of one GPU
MEMORY_ANNOTATION = f"{GROUP}/gpu-memory"  # MiB of one GPU
# what a fraction may burst to when its GPU has room (admitted and charged by the request)
FRACTION_LIMIT_ANNOTATION = f"{GROUP}/gpu-fraction-limit"  # milli-GPU, at least the request
MEMORY_LIMIT_ANNOTATION = f"{GROUP}/gpu-memory-limit"  # MiB, at least the request
# the scheduler's account of a bursting fraction's share of its GPU now (request, limit, what
# its neighbours leave it), rewritten as they come and go
GPU_SHARE_ANNOTATION = f"{GROUP}/gpu-share"
# seconds a workload is expected to run once started (reservations judge backfill by it)
EXPECTED_RUNTIME_ANNOTATION = f"{GROUP}/expected-runtime"
GANG_ANNOTATION = f"{GROUP}/gang"  # "false": not a gang, whatever the owner
PREEMPTIBLE_LABEL = f"{GROUP}/preemptible"  # on a PriorityClass

# ----------------------------------------------------------------- pods: what gpucarve writes
MUTATED_ANNOTATION = f"{GROUP}/mutated"  # the webhook's list of changes
DEVICE_CONFIG_ANNOTATION = f"{GROUP}/device-config"  # the ConfigMap a fraction's env comes from
ASSIGNMENT_ANNOTATION = f"{GROUP}/assignment"  # the slices the scheduler bound the pod to
# when the scheduler saw the pod's workload go idle (its queue's idleness rule), RFC 3339:
# what explain and a restarted scheduler read back
IDLE_SINCE_ANNOTATION = f"{GROUP}/idle-since"
POD_DEVICES_ANNOTATION = f"{GROUP}/pod-devices"  # what the node agent saw the pod get

# ----------------------------------------------------------------- nodes
POOL_LABEL = f"{GROUP}/pool"
MODE_LABEL = f"{GROUP}/gpu-mode"
# the GPU Operator's label on every node with an NVIDIA GPU: its operands' DaemonSets select
# it, and so does the chart's node agent (nodeAgent.nodeSelector)
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MISMATCH_LABEL = f"{GROUP}/mismatch"
RACK_LABEL = f"{GROUP}/rack"
BLOCK_LABEL = f"{GROUP}/block"
UNHEALTHY_ANNOTATION = f"{GROUP}/unhealthy-gpus"
UNHEALTHY_TAINT = f"{GROUP}/gpu-unhealthy"
# the scheduler's answer to the agent's faults: the GPUs it took out of service (JSON: GPU index
# -> fault class), within the pool's budget; what the agent remediates
OUT_OF_SERVICE_ANNOTATION = f"{GROUP}/gpus-out-of-service"
# the node condition the agent sets for a remediation controller when a GPU needs a reboot
REBOOT_CONDITION = "GPURebootRequired"
MIG_LAYOUT_ANNOTATION = f"{GROUP}/mig-layout"
MIG_CHANGE_ANNOTATION = f"{GROUP}/mig-change"
# on the scheduler's own pod: "true" while it holds the Lease (the dashboard's Service selects it)
LEADER_LABEL = f"{GROUP}/leader"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpucarve"

# ----------------------------------------------------------------- the ecosystem's names
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # the kubelet's label of its node's name
# Dynamic Resource Allocation: NVIDIA's DRA driver and the device classes of its whole GPUs
# and its MIG devices
DRA_GPU_DRIVER = "gpu.nvidia.com"
DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_MIG_CLASS = "mig.nvidia.com"
# a ResourceQuota caps the devices a namespace's claims of a class ask for as
# `<class>.deviceclass.resource.k8s.io/devices`
DEVICE_CLASS_QUOTA_SUFFIX = "deviceclass.resource.k8s.io/devices"
COSCHEDULING_GROUP = "scheduling.x-k8s.io"
COSCHEDULING_VERSION = "v1alpha1"
COSCHEDULING_GROUP_LABEL = f"{COSCHEDULING_GROUP}/pod-group"
# Kubernetes' own gang API (KEP-4671, beta in 1.37): a pod names its PodGroup in
# spec.schedulingGroup.podGroupName
WORKLOAD_API_GROUP = "scheduling.k8s.io"
WORKLOAD_API_VERSION = "v1beta1"

QUEUE_LABELS = (QUEUE_LABEL, KUEUE_QUEUE_LABEL)
GROUP_LABELS = (POD_GROUP_LABEL, COSCHEDULING_GROUP_LABEL)

# Annotations that make the scheduler act (write an object by that name, trust an assignment):
# only gpucarve sets them. The webhook removes a tenant's at creation and refuses a change.
SCHEDULER_OWNED_ANNOTATIONS = (DEVICE_CONFIG_ANNOTATION, ASSIGNMENT_ANNOTATION)

# A pod in one of these phases has ended: it holds nothing and is no gang member any more.
TERMINAL_PHASES = ("Succeeded", "Failed")
