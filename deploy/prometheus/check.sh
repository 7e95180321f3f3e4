#!/usr/bin/env bash
# Checks the alert rules and runs their unit tests with promtool:
#   promtool check rules inboxd-rules.yaml
#   promtool test rules  inboxd-rules.test.yaml
# Exits non-zero on any problem. promtool must be on PATH
# (deploy/prometheus/install-promtool.sh installs it from Debian's packages).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v promtool >/dev/null 2>&1; then
  echo "check.sh: promtool is not on PATH; run deploy/prometheus/install-promtool.sh" >&2
  exit 127
fi

promtool --version 2>&1 | head -n 1
promtool check rules inboxd-rules.yaml
promtool test rules inboxd-rules.test.yaml
