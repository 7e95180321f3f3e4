#!/usr/bin/env bash
# Regenerates deploy/kubernetes/prometheusrule.yaml from inboxd-rules.yaml: the
# same groups under spec:, in a PrometheusRule of the Prometheus Operator.
# TestRulesPrometheusRuleMatches (deploy/rules_test.go) fails when they differ.
set -euo pipefail
cd "$(dirname "$0")"

out=../kubernetes/prometheusrule.yaml
{
  cat <<'EOF'
# inboxd's alerting rules for the Prometheus Operator. GENERATED from
# deploy/prometheus/inboxd-rules.yaml by deploy/prometheus/prometheusrule.sh:
# edit that file and rerun the script. Apply next to deploy/kubernetes/inboxd.yaml:
#   kubectl apply -f deploy/kubernetes/prometheusrule.yaml
# The Prometheus resource's ruleSelector must match these labels (for
# kube-prometheus-stack, add `release: <its Helm release name>`). The rules
# select job="inboxd", the job servicemonitor.yaml scrapes inboxd as.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: inboxd
  labels:
    app.kubernetes.io/name: inboxd
spec:
EOF
  # Everything from `groups:` on, indented under spec:.
  sed -n '/^groups:/,$p' inboxd-rules.yaml | sed -e 's/^\(.\)/  \1/'
} >"$out"
echo "prometheusrule.sh: wrote $out"
