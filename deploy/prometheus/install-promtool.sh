#!/usr/bin/env bash
# Installs promtool (for deploy/prometheus/check.sh) from Debian's prometheus package
# when it is not on PATH already. Only the promtool binary is unpacked into
# ${PROMTOOL_DIR:-/usr/local/bin} (a 19 MB download, one 48 MB binary that
# needs only libc). `apt-get install prometheus` would also bring a dozen web UI
# packages (two dozen more with recommends, node-exporter among them) and its
# postinst starts a Prometheus server wherever policy-rc.d allows services to
# start. Needs root (apt-get) on a Debian or Ubuntu machine.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  echo "install-promtool: $(command -v promtool) is already installed: $(promtool --version 2>&1 | head -n 1)"
  exit 0
fi

dest=${PROMTOOL_DIR:-/usr/local/bin}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

download() { apt-get download -q -o APT::Sandbox::User=root prometheus >/dev/null; }
if ! download 2>/dev/null; then
  # A fresh machine may have no package lists yet.
  echo "install-promtool: apt-get download failed; running apt-get update and trying again"
  apt-get update -q >/dev/null
  download
fi

deb=$(ls prometheus_*.deb)
dpkg-deb --fsys-tarfile "$deb" | tar -x ./usr/bin/promtool
install -D -m 0755 usr/bin/promtool "$dest/promtool"
echo "install-promtool: installed $dest/promtool from $deb: $("$dest/promtool" --version 2>&1 | head -n 1)"
