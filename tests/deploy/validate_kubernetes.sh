#!/usr/bin/env bash
# Renders Cascade's Kubernetes deployment the way users apply it and validates it:
#   1. `kubectl kustomize deploy/kubernetes` (CPU, the default),
#      `kubectl kustomize deploy/kubernetes/overlays/gpu` and the standby-coordinator
#      variants overlays/ha and overlays/gpu-ha must render, with no warning;
#   2. every rendered object (and deploy/kubernetes/tools/*.yaml) must pass the
#      Kubernetes schemas of the npm package kubernetes-models 4.x, with no unknown
#      field and no unknown kind (tests/deploy/validate.mjs);
#   3. every PVC, ConfigMap, Secret and Service a workload or probe references must be
#      defined (Secrets created by hand are listed in validate.mjs and must be
#      documented in deploy/README.md); the coordinator and the workers have startup,
#      liveness and readiness probes and resources; the GPU overlays request
#      nvidia.com/gpu; the HA overlays run 2 coordinators that elect a leader on a
#      3-member etcd, each advertising its own name, and workers that list both;
#      NetworkPolicies, security contexts and flags as validate.mjs says.
#
#   tests/deploy/validate_kubernetes.sh [BIN_DIR [CACHE_DIR]]
#
# BIN_DIR:   the build's bin folder; the flags in the manifests are checked against
#            cascade-coordinator --help and cascade-worker --help (optional).
# CACHE_DIR: where npm installs kubernetes-models and yaml (default: tests/deploy, i.e.
#            tests/deploy/node_modules, ignored by git). Installed once per lockfile.
#
# Needs kubectl >= 1.27 (it bundles kustomize v5), Node.js >= 20 and npm (the npm
# registry, on the first run only). Without one of them the test is skipped (exit 77)
# on a developer's machine, and fails when CI is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-}
cache=${2:-$here}

in_ci() { [[ -n ${CI:-} && ${CI} != false && ${CI} != 0 ]]; }
unavailable() {
  if in_ci; then
    echo "deploy_kubernetes: FAILED: $1 (CI is set: this check may not be skipped there)" >&2
    exit 1
  fi
  echo "deploy_kubernetes: SKIPPED: $1"
  exit 77
}

command -v kubectl >/dev/null || unavailable "kubectl is not installed (needs kubectl >= 1.27, which bundles kustomize v5)"
kustomize_major=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
if [[ -z $kustomize_major || $kustomize_major -lt 5 ]]; then
  unavailable "$(command -v kubectl) bundles kustomize '${kustomize_major:-unknown, too old}'; needs kubectl >= 1.27 (kustomize v5). Debian 12's kubernetes-client (1.20) is too old"
fi
command -v node >/dev/null || unavailable "node is not installed (needs Node.js >= 20)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= 20)) || unavailable "Node.js $(node --version) is too old (needs >= 20)"
command -v npm >/dev/null || unavailable "npm is not installed"

# The npm packages, installed from the committed lockfile (npm ci) when it changed.
mkdir -p "$cache"
if [[ $(cd "$cache" && pwd) != "$here" ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
fi
stamp=$cache/node_modules/.cascade-deploy-lock
if ! cmp -s "$here/package-lock.json" "$stamp"; then
  echo "deploy_kubernetes: npm ci in $cache (kubernetes-models, yaml)"
  if ! (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error); then
    unavailable "npm ci failed in $cache (is the npm registry reachable?)"
  fi
  cp "$here/package-lock.json" "$stamp"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
echo "deploy_kubernetes: $(kubectl version --client 2>/dev/null | tr '\n' ' ')"
validate() {  # profile kustomization-dir
  local profile=$1 dir=$2
  if ! kubectl kustomize "$root/$dir" >"$tmp/$profile.yaml" 2>"$tmp/$profile.err"; then
    echo "deploy_kubernetes: kubectl kustomize $dir failed:" >&2
    cat "$tmp/$profile.err" >&2
    status=1
    return
  fi
  if [[ -s $tmp/$profile.err ]]; then
    echo "deploy_kubernetes: kubectl kustomize $dir warned (fix the kustomization):" >&2
    cat "$tmp/$profile.err" >&2
    status=1
  fi
  echo "deploy_kubernetes: kubectl kustomize $dir: $(grep -c '^kind:' "$tmp/$profile.yaml") objects"
  check "$profile" "$tmp/$profile.yaml" || status=1
}
check() {  # profile rendered.yaml [extra validate.mjs arguments]
  local args=(--modules "$cache" --repo "$root" --profile "$1" --rendered "$2")
  local extra
  for extra in "$root"/deploy/kubernetes/tools/*.yaml; do
    [[ -e $extra ]] && args+=(--extra "$extra")
  done
  [[ -n $bin ]] && args+=(--bin "$bin")
  node "$here/validate.mjs" "${args[@]}"
}
validate cpu deploy/kubernetes
validate gpu deploy/kubernetes/overlays/gpu
validate ha deploy/kubernetes/overlays/ha
validate gpu-ha deploy/kubernetes/overlays/gpu-ha

# The checker must see what it is there for: each of these breakages of a rendering
# must make it fail.
mutants=0
mutant() {  # profile sed-expression description
  ((status == 0)) || return 0   # meaningful only when the real renderings pass
  mutants=$((mutants + 1))
  sed -e "$2" "$tmp/$1.yaml" >"$tmp/mutant.yaml"
  if cmp -s "$tmp/$1.yaml" "$tmp/mutant.yaml"; then
    echo "deploy_kubernetes: self-check '$3': the edit matched nothing" >&2
    status=1
  elif check "$1" "$tmp/mutant.yaml" >/dev/null 2>&1; then
    echo "deploy_kubernetes: self-check: validate.mjs missed $3" >&2
    status=1
  fi
}
mutant cpu 's/claimName: cascade-models/claimName: cascade-modelz/' "an undefined PVC"
mutant cpu 's/secretName: cascade-join-token/secretName: cascade-join-tokn/' "an undefined Secret"
mutant cpu 's/--coordinator=cascade-control:/--coordinator=cascade-contrl:/' "an undefined Service"
mutant cpu 's/readinessProbe:/readinesProbe:/' "a misspelt field"
mutant cpu 's/protocol: TCP/protocol: TCPX/' "a schema violation"
mutant cpu 's/publishNotReadyAddresses: true/publishNotReadyAddresses: false/' "a bring-up Service that hides not-ready pods"
mutant cpu '/^kind: NetworkPolicy/,/^---/ s/- port: 8080/- port: 50053/' "a control port open to all"
mutant cpu 's/workers: 3/workers: 2/' "a cluster file that disagrees with the replicas"
mutant cpu 's/^          name: cascade-config-/          name: cascade-configx-/' "an undefined ConfigMap"
mutant gpu '/nvidia.com\/gpu: 1/d' "GPU workers without a GPU"
mutant ha 's/,cascade-coordinator-1.cascade-coordinator:50053//' "workers that do not list every coordinator"
mutant ha 's/-0.cascade-coordinator:50053,/-2.cascade-coordinator:50053,/' "workers listing a coordinator that does not exist"
mutant ha 's/--advertise=$(POD_NAME).cascade-coordinator:/--advertise=cascade-coordinator-1.cascade-coordinator:/' "coordinators that do not advertise their own names"
mutant ha '/- --etcd=/d' "standby coordinators without --etcd"
mutant ha 's/type: OnDelete/type: RollingUpdate/' "a rolling update that would wait for a standby to be ready"
mutant ha 's/,etcd-2=http:\/\/etcd-2.etcd:2380//' "an etcd --initial-cluster missing a member"
mutant ha 's/value: etcd-0.etcd:2379,etcd-1.etcd:2379,etcd-2.etcd:2379/value: etcd-0.etcd:2379/' "--etcd missing members"
mutant ha '/^  name: cascade-coordinator$/,/^---/ s/clusterIP: None/clusterIP: 10.96.0.53/' "the coordinators' control port behind one virtual IP"
if [[ -n $bin && -x $bin/cascade-coordinator && -x $bin/cascade-worker ]]; then
  mutant cpu 's/--listen=0.0.0.0:50061/--listne=0.0.0.0:50061/' "a flag cascade-worker does not have"
  mutant cpu 's/kv_sequences: 0/kv_sequnces: 0/' "a cluster-file key cascade-coordinator does not have"
  mutant ha 's/--lease-ttl-s=5/--lease-tl-s=5/' "a standby flag cascade-coordinator does not have"
fi
((status)) || echo "deploy_kubernetes: self-check: $mutants broken renderings, each rejected"

if ((status)); then
  echo "deploy_kubernetes: FAILED" >&2
  exit 1
fi
echo "deploy_kubernetes: passed"
