#!/usr/bin/env bash
# Builds the real Kubernetes components the integration tests run and the benchmarks compare
# against: kube-apiserver, kube-controller-manager, kube-scheduler (bench/bind.py's peer) and
# kubectl (from the k8s.io/kubernetes module through a wrapper module, because that module's
# own go.mod points its staging modules at local paths), etcd (go.etcd.io/etcd/server/v3),
# kwok (fake kubelets), helm (helm.sh/helm/v3, for the chart tests), promtool and prometheus
# (github.com/prometheus/prometheus: the alert rules' tests, and the server `import prometheus`
# reads) and kube-state-metrics (k8s.io/kube-state-metrics/v2, what that server scrapes).
# Binaries are cached per user, outside the clone, so a fresh checkout reuses them.
# Usage: tools/testenv.sh            build what is missing, print the bin folder
set -euo pipefail

K8S_VERSION="${GPUCARVE_K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${GPUCARVE_ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${GPUCARVE_KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${GPUCARVE_HELM_VERSION:-v3.22.0}"
PROMETHEUS_VERSION="${GPUCARVE_PROMETHEUS_VERSION:-v0.316.0}"  # the Go module's tag of Prometheus 3
KSM_VERSION="${GPUCARVE_KSM_VERSION:-v2.20.0}"
CACHE="${GPUCARVE_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpucarve/testenv}"
BIN="$CACHE/bin-$K8S_VERSION-$ETCD_VERSION-$KWOK_VERSION"
mkdir -p "$BIN"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
export CGO_ENABLED=0

log() { echo "testenv: $*" >&2; }

# GPUCARVE_TESTENV_WHERE=1: print the bin folder and build nothing (a caller that needs only
# some binaries uses them at once when they are there, without waiting for another build)
if [ -n "${GPUCARVE_TESTENV_WHERE:-}" ]; then
  echo "$BIN"
  exit 0
fi

# Two clones building at once must neither race on the same temporary file nor both spend
# 20 minutes: one holds the lock and builds, the other waits and then finds the binaries.
# Each binary is written under a unique temporary name and renamed into place (atomic).
if command -v flock >/dev/null 2>&1 && [ -z "${GPUCARVE_TESTENV_LOCKED:-}" ]; then
  exec 9>"$CACHE/.build.lock"
  if ! flock -n 9; then
    log "another build holds $CACHE/.build.lock; waiting for it"
    flock 9
  fi
  export GPUCARVE_TESTENV_LOCKED=1
fi
tmp_for() { mktemp "$BIN/.$1.XXXXXX"; }

# kube-apiserver, kube-controller-manager and kubectl come from one wrapper module of the same
# k8s.io/kubernetes release, so the control plane and the client the tests drive agree.
kube_wrapper() {
  local work="$CACHE/wrap-$K8S_VERSION"
  local minor="${K8S_VERSION#v1.}"          # 36.3
  local staging="v0.$minor"                 # v0.36.3
  mkdir -p "$work"
  cd "$work"
  if [ ! -f go.mod ]; then
    go mod init gpucarve.local/testenv >/dev/null 2>&1
  fi
  if ! grep -q kube-scheduler tools.go 2>/dev/null; then
    go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >"$work/kube.json"
    local gomod
    gomod="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["GoMod"])' "$work/kube.json")"
    # Every staging module the release replaces with a local path gets its published v0.Y.Z tag.
    local mods
    mods="$(grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk '{print $1}' | sort -u)"
    if [ -z "$mods" ]; then
      log "no staging replaces found in $gomod"; exit 1
    fi
    go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
    for m in $mods; do
      go mod edit -replace="$m=$m@$staging"
    done
    cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go mod tidy >/dev/null
  fi
}

build_kube() {  # name: a command of k8s.io/kubernetes/cmd
  kube_wrapper
  local tmp
  tmp="$(tmp_for "$1")"
  go build -o "$tmp" "k8s.io/kubernetes/cmd/$1"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$BIN/$1"
}

# A module whose go.mod carries replace directives cannot be `go install`ed; building it from a
# wrapper module that requires it lets the published versions of its siblings be used instead.
build_wrapped() {  # name module version package
  local work="$CACHE/wrap-$1-$3"
  mkdir -p "$work"
  cd "$work"
  [ -f go.mod ] || go mod init "gpucarve.local/testenv-$1" >/dev/null 2>&1
  go mod edit -require="$2@$3"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$4" >tools.go
  go mod tidy >/dev/null
  local tmp
  tmp="$(tmp_for "$1")"
  go build -o "$tmp" "$4"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$BIN/$1"
}

build_etcd() { build_wrapped etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3; }

build_kwok() { build_wrapped kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok; }

build_helm() { build_wrapped helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm; }

build_promtool() {
  build_wrapped promtool github.com/prometheus/prometheus "$PROMETHEUS_VERSION" \
    github.com/prometheus/prometheus/cmd/promtool
}

# the server without its web UI's assets (they need npm; the HTTP API is all a test reads)
build_prometheus() {
  build_wrapped prometheus github.com/prometheus/prometheus "$PROMETHEUS_VERSION" \
    github.com/prometheus/prometheus/cmd/prometheus
}

build_ksm() {
  build_wrapped kube-state-metrics k8s.io/kube-state-metrics/v2 "$KSM_VERSION" \
    k8s.io/kube-state-metrics/v2
}

# kwok does nothing without stages; kwokctl passes the ones the kwok module ships. Use the same:
# nodes turn Ready and keep a heartbeat, pods run and complete after the delay their
# `pod-complete.stage.kwok.x-k8s.io/delay` annotation asks for.
kwok_stages() {
  local src
  src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  [ -d "$src" ] || (cd "$CACHE/wrap-kwok-$KWOK_VERSION" && go mod download sigs.k8s.io/kwok)
  local out
  out="$(tmp_for kwok-stages.yaml)"
  : >"$out"
  for f in "$src"/node/fast/*.yaml "$src"/node/heartbeat/*.yaml "$src"/pod/general/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    printf -- '---\n' >>"$out"
    cat "$f" >>"$out"
  done
  chmod 0644 "$out"
  mv -f "$out" "$BIN/kwok-stages.yaml"
}

# A cold build runs for minutes without a word from go: say it is alive once a minute.
heartbeat() {  # what, then the command
  local what="$1"
  shift
  ("$@") &
  local pid=$! start=$SECONDS next=60
  while sleep 2 && kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - start >= next)); then
      log "still building $what ($((next / 60)) min)"
      next=$((next + 60))
    fi
  done
  wait "$pid"
}

[ -x "$BIN/etcd" ] || { log "building etcd $ETCD_VERSION"; heartbeat etcd build_etcd; }
[ -x "$BIN/kwok" ] || { log "building kwok $KWOK_VERSION"; heartbeat kwok build_kwok; }
[ -f "$BIN/kwok-stages.yaml" ] || kwok_stages
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [ -x "$BIN/$cmd" ] || {
    log "building $cmd $K8S_VERSION (minutes on a cold cache)"
    heartbeat "$cmd" build_kube "$cmd"
  }
done
[ -x "$BIN/helm" ] || { log "building helm $HELM_VERSION"; heartbeat helm build_helm; }
[ -x "$BIN/promtool" ] || {
  log "building promtool $PROMETHEUS_VERSION"
  heartbeat promtool build_promtool
}
[ -x "$BIN/prometheus" ] || {
  log "building prometheus $PROMETHEUS_VERSION"
  heartbeat prometheus build_prometheus
}
[ -x "$BIN/kube-state-metrics" ] || {
  log "building kube-state-metrics $KSM_VERSION"
  heartbeat kube-state-metrics build_ksm
}
echo "$BIN"
