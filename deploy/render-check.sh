#!/usr/bin/env bash
# Renders the deployment manifests with the real tools, where they are installed:
#   kubectl kustomize (or kustomize build) on every kustomization under deploy/kustomize,
#   helm lint + helm template on deploy/helm/kcache (default values: HTTPS with delegated auth;
#   TLS off; a client CA; cert-manager; every optional object on; the PrometheusRule; and values
#   the chart must refuse),
#   promtool check rules / test rules on deploy/prometheus (the alerting rules),
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
# The alerting rules (the single source) and the sorted alert names of a file.
rules=deploy/prometheus/kcache-rules.yaml
alerts() { grep -Eo 'alert: [A-Za-z]+' "$1" | sort; }

# promtool (tests/alerts.rs runs these too, and a real Prometheus with the rules)
if have promtool; then
  promtool check rules "$rules" >/dev/null && echo "ok: promtool check rules $rules" \
    || fail "promtool check rules $rules"
  promtool test rules deploy/prometheus/kcache-rules.test.yaml >/dev/null \
    && echo "ok: promtool test rules" || fail "promtool test rules"
else
  echo "skip: promtool is not installed (apt-get install prometheus): alerting rules not checked"
fi

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
  base="$out/kustomize-base.yaml"
  if [ -s "$base" ]; then
    for want in '- --auth' '- --tls-cert-file' '- --admin-listen' 'port: admin' 'secretName: kcache-tls' \
      'tokenreviews' 'subjectaccessreviews'; do
      grep -Eq -- "$want" "$base" || fail "kustomize base: no '$want'"
    done
    # Impersonation is granted only where client certificates are accepted (see the base's
    # ClusterRole); the base does not accept them.
    if grep -Eq -- '- impersonate|\[impersonate\]' "$base"; then
      fail "kustomize base: grants impersonate"
    fi
  fi
  if [ -s "$out/kustomize-cert-manager.yaml" ]; then
    grep -q 'kind: Certificate' "$out/kustomize-cert-manager.yaml" \
      || fail "kustomize cert-manager: no Certificate"
  fi
  if [ -s "$out/kustomize-prometheusrule.yaml" ]; then
    grep -q 'kind: PrometheusRule' "$out/kustomize-prometheusrule.yaml" \
      || fail "kustomize prometheusrule: no PrometheusRule"
    [ "$(alerts "$out/kustomize-prometheusrule.yaml")" = "$(alerts "$rules")" ] \
      || fail "kustomize prometheusrule: not the alerts of $rules"
  fi
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
  # has FILE PATTERN..., lacks FILE PATTERN...: grep -E on a rendering.
  has() { local f="$1"; shift; for p in "$@"; do grep -Eq -- "$p" "$out/helm-$f.yaml" || fail "helm $f: no '$p'"; done; }
  lacks() { local f="$1"; shift; for p in "$@"; do grep -Eq -- "$p" "$out/helm-$f.yaml" && fail "helm $f: '$p'"; done; return 0; }
  if render defaults; then
    echo "ok: helm template $chart"
    has defaults '- --auth' '- "delegated"' '- --tls-cert-file' '- --admin-listen' \
      'containerPort: 8081' 'port: admin' 'scheme: HTTP$' \
      'containerPort: 8443' 'port: 443' 'secretName: kcache-tls' 'tokenreviews' \
      'subjectaccessreviews' 'maxRequestBytes: 3145728'
    lacks defaults 'impersonate' '- --client-ca-file' 'kind: Certificate'
  else
    fail "helm template $chart"
  fi
  if render tls-off --set tls.enabled=false; then
    echo "ok: helm template $chart (tls.enabled=false)"
    has tls-off 'scheme: HTTP$' 'containerPort: 8080' 'port: 8080'
    lacks tls-off '- --tls-cert-file' 'scheme: HTTPS'
  else
    fail "helm template $chart (tls.enabled=false)"
  fi
  if render client-ca --set tls.clientCA.configMapName=kcache-client-ca; then
    echo "ok: helm template $chart (tls.clientCA)"
    has client-ca '- --client-ca-file' '/etc/kcache-client-ca/ca.crt' 'impersonate' 'name: kcache-client-ca'
  else
    fail "helm template $chart (tls.clientCA)"
  fi
  if render all-on --set serviceMonitor.enabled=true --set auth=trust-local \
    --set 'serviceMonitor.labels.release=prometheus' \
    --set tls.certManager.enabled=true --set tls.certManager.issuerRef.name=ca-issuer; then
    echo "ok: helm template $chart (serviceMonitor, cert-manager, auth=trust-local)"
    has all-on 'kind: ServiceMonitor' '- port: admin' 'scheme: http$' \
      'kind: Certificate' 'kcache.kcache-system.svc' '- "trust-local"'
    lacks all-on 'insecureSkipVerify'
  else
    fail "helm template $chart (serviceMonitor, cert-manager, auth=trust-local)"
  fi
  if render prometheus-rule --set prometheusRule.enabled=true \
    --set 'prometheusRule.labels.release=prometheus'; then
    echo "ok: helm template $chart (prometheusRule)"
    has prometheus-rule 'kind: PrometheusRule' 'release: prometheus' 'runbook_url: docs/runbooks.md#' \
      '\{\{ \$labels.resource \}\}'
    [ "$(alerts "$out/helm-prometheus-rule.yaml")" = "$(alerts "$rules")" ] \
      || fail "helm prometheus-rule: not the alerts of $rules"
    lacks defaults 'kind: PrometheusRule'
  else
    fail "helm template $chart (prometheusRule)"
  fi
  # The rendered kcache.yaml must pass `kcache config check` when a kcache binary is at hand.
  kcache_bin="${KCACHE_BIN:-target/debug/kcache}"
  if [ -x "$kcache_bin" ] && have python3; then
    for f in defaults all-on; do
      python3 - "$out/helm-$f.yaml" "$out/helm-$f-kcache.yaml" <<'PY' || fail "helm $f: no kcache.yaml"
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^  kcache.yaml: \|\n((?:    .*\n|\n)+)", text, re.M)
open(sys.argv[2], "w").write("".join(l[4:] + "\n" for l in m.group(1).splitlines()))
PY
      "$kcache_bin" config check "$out/helm-$f-kcache.yaml" >/dev/null \
        && echo "ok: kcache config check (helm $f)" || fail "kcache config check (helm $f)"
    done
  else
    echo "skip: no kcache binary at $kcache_bin (set KCACHE_BIN): rendered kcache.yaml not checked"
  fi
  rm -f "$out/helm-refused.yaml"
  for refused in "networkPolicy.enabled=false --set auth=trust-local" "auth=none" "auth=bogus" \
    "logFormat=xml" "tls.enabled=false --set tls.clientCA.secretName=ca" \
    "tls.clientCA.secretName=a --set tls.clientCA.configMapName=b" \
    "tls.certManager.enabled=true" "config.limits.maxWatches=1" "adminPort=8443" \
    "config.adminListen=0.0.0.0:9"; do
    # shellcheck disable=SC2086 # word splitting: "--set a=b --set c=d"
    if render refused --set $refused 2>/dev/null; then
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
