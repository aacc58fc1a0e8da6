{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "gpucarve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpucarve.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpucarve.labels" -}}
{{ include "gpucarve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpucarve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpucarve.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name the ServiceAccount to run as when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding policy.yaml: the chart's, or one the user manages. */}}
{{- define "gpucarve.policyConfigMap" -}}
{{- if .Values.existingPolicyConfigMap -}}
{{- .Values.existingPolicyConfigMap -}}
{{- else -}}
{{- if not .Values.policy -}}
{{- fail "policy: no policy given; fix: --set-file policy=my-policy.yaml (a file `gpucarve validate` accepts), or name a ConfigMap with key policy.yaml in existingPolicyConfigMap" -}}
{{- end -}}
{{- printf "%s-policy" (include "gpucarve.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "gpucarve.leaseName" -}}
{{- printf "%s-scheduler" .Values.schedulerName -}}
{{- end -}}

{{/* The namespaces the webhook governs: webhook.namespaces, else the policy's queues'. */}}
{{- define "gpucarve.webhookNamespaces" -}}
{{- $out := list -}}
{{- if .Values.webhook.namespaces -}}
{{- $out = .Values.webhook.namespaces -}}
{{- else if .Values.policy -}}
{{- $policy := fromYaml .Values.policy -}}
{{- range $q := ($policy.queues | default list) -}}
{{- range $ns := ($q.namespaces | default list) -}}
{{- $out = append $out $ns -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $kept := list -}}
{{- range $ns := ($out | uniq | sortAlpha) -}}
{{- if and (ne $ns "kube-system") (ne $ns $.Release.Namespace) -}}
{{- $kept = append $kept $ns -}}
{{- end -}}
{{- end -}}
{{- if not $kept -}}
{{- fail "webhook.namespaces: no namespace to govern; fix: list them in webhook.namespaces (needed with existingPolicyConfigMap), or set webhook.enabled=false" -}}
{{- end -}}
{{- toJson $kept -}}
{{- end -}}

{{/*
CEL: an update changes one of the annotations only gpucarve sets
(gpucarve.core.vocabulary.SCHEDULER_OWNED_ANNOTATIONS; a unit test holds the two equal).
*/}}
{{- define "gpucarve.ownedAnnotationsChanged" -}}
['gpucarve.io/device-config', 'gpucarve.io/assignment'].exists(k, (has(object.metadata.annotations) && k in object.metadata.annotations ? object.metadata.annotations[k] : '') != (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations ? oldObject.metadata.annotations[k] : ''))
{{- end }}

{{/*
CEL: an update of a bound pod changes a label its queue is read from
(gpucarve.core.vocabulary.QUEUE_LABELS): the queue it was admitted under is kept.
*/}}
{{- define "gpucarve.boundQueueChanged" -}}
has(oldObject.spec.nodeName) && oldObject.spec.nodeName != '' && ['gpucarve.io/queue', 'kueue.x-k8s.io/queue-name'].exists(k, (has(object.metadata.labels) && k in object.metadata.labels ? object.metadata.labels[k] : '') != (has(oldObject.metadata.labels) && k in oldObject.metadata.labels ? oldObject.metadata.labels[k] : ''))
{{- end }}

{{/*
CEL: a pod asks for GPUs (gpucarve.devcluster.webhook.ASKS_GPU; a test holds the chart and the
stack equal): a device-plugin resource in any container, ResourceClaims, or a gpucarve fraction.
*/}}
{{- define "gpucarve.asksGpu" -}}
(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) || (has(object.metadata.annotations) && ['gpucarve.io/gpu-fraction', 'gpucarve.io/gpu-memory'].exists(k, k in object.metadata.annotations)) || object.spec.containers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith('nvidia.com/'))) || (has(c.resources.requests) && c.resources.requests.exists(r, r.startsWith('nvidia.com/'))))) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith('nvidia.com/'))) || (has(c.resources.requests) && c.resources.requests.exists(r, r.startsWith('nvidia.com/'))))))
{{- end }}
