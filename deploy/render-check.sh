#!/usr/bin/env bash
# Renders the deployment manifests with the real tools, where they are installed:
#   kubectl kustomize (or kustomize build) on every kustomization under deploy/kustomize,
#   helm lint + helm template on deploy/helm/kcache (default values, every optional object on,
#   and values the chart must refuse),
#   and, if kubeconform or kubernetes-validate is installed, a strict schema check of the
#   rendered objects and of deploy/examples.
# A missing tool is skipped with a message; a tool that finds a problem fails the script.
# Usage: deploy/render-check.sh [OUTPUT_DIR]   (rendered files are kept there if given)
set -uo pipefail
cd "$(dirname "$0")/.."

out="${1:-}"
if [ -z "$out" ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
have() { command -v "$1" >/dev/null 2>&1; }

# kustomize
if have kubectl; then
  kustomize=(kubectl kustomize)
elif have kustomize; then
  kustomize=(kustomize build)
else
  kustomize=()
  echo "skip: neither kubectl nor kustomize is installed (kustomize rendering not checked)"
fi
if [ ${#kustomize[@]} -gt 0 ]; then
  for dir in deploy/kustomize/*/; do
    dir="${dir%/}"
    file="$out/kustomize-$(basename "$dir").yaml"
    if "${kustomize[@]}" "$dir" >"$file"; then
      echo "ok: ${kustomize[*]} $dir ($(grep -c '^kind:' "$file") objects)"
    else
      fail "${kustomize[*]} $dir"
    fi
  done
fi

# helm
chart=deploy/helm/kcache
if have helm; then
  helm lint --strict "$chart" || fail "helm lint $chart"
  render() { # name, extra helm args...
    local name="$1"
    shift
    helm template kcache "$chart" --namespace kcache-system "$@" >"$out/helm-$name.yaml"
  }
  render defaults && echo "ok: helm template $chart" || fail "helm template $chart"
  render all-on --set serviceMonitor.enabled=true --set auth=delegated \
    --set 'serviceMonitor.labels.release=prometheus' \
    && echo "ok: helm template $chart (serviceMonitor, auth=delegated)" \
    || fail "helm template $chart (serviceMonitor, auth=delegated)"
  grep -q -- '- --auth' "$out/helm-defaults.yaml" && fail "--auth passed with auth=none"
  grep -q -- '- --auth' "$out/helm-all-on.yaml" || fail "--auth not passed with auth=delegated"
  rm -f "$out/helm-refused.yaml"
  for refused in "networkPolicy.enabled=false" "auth=bogus" "logFormat=xml"; do
    if render refused --set "$refused" 2>/dev/null; then
      fail "helm template accepts --set $refused"
    else
      echo "ok: helm template refuses --set $refused"
    fi
  done
  rm -f "$out/helm-refused.yaml"
else
  echo "skip: helm is not installed (chart rendering not checked)"
fi

# schemas
shopt -s nullglob
rendered=("$out"/*.yaml deploy/examples/*.yaml)
if have kubeconform; then
  kubeconform -strict -summary -ignore-missing-schemas "${rendered[@]}" || fail "kubeconform"
elif have kubernetes-validate; then
  # ServiceMonitor has no built-in schema: reported as a warning, not a failure.
  kubernetes-validate --strict --quiet "${rendered[@]}" || fail "kubernetes-validate"
else
  echo "skip: neither kubeconform nor kubernetes-validate is installed (schemas not checked)"
fi

if [ "$failed" -ne 0 ]; then
  echo "render-check: FAILED"
  exit 1
fi
echo "render-check: ok"
