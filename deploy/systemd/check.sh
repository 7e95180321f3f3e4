#!/usr/bin/env bash
# Checks deploy/systemd/ with the host's systemd tools, without a running
# systemd (works in a container, as root or not):
#
#  1. systemd-analyze verify of inboxd.service inside a throw-away --root tree
#     holding the host's unit files, /bin/kill and a STUB /usr/local/bin/inboxd
#     (verify refuses a unit whose ExecStart= binary is missing). It checks the
#     unit's syntax, that every directive is known and parses, that the
#     dependencies resolve and that the Exec*= paths are executables. It does
#     not run anything: whether the daemon sends READY=1, feeds the watchdog
#     or survives the sandbox is not checked here. Any output fails the check
#     (verify exits 0 after "Failed to parse ..., ignoring" warnings).
#  2. systemd-analyze security --offline=yes: the exposure score must be 2.5
#     or lower.
#  3. The install steps of inboxd.service's header, in another --root tree:
#     systemd-sysusers creates user and group inboxd, systemd-tmpfiles creates
#     /etc/inboxd (root:inboxd 0750) and fixes the mode of the env file.
#     Needs root (chown); skipped, and said so, otherwise.
#
# Exit status: 0 all good, 1 a check failed or systemd-analyze is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
unit="$here/inboxd.service"
max_exposure=25 # tenths: 2.5

fail() { echo "check.sh: FAIL: $*" >&2; exit 1; }

for tool in systemd-analyze systemd-sysusers systemd-tmpfiles; do
  command -v "$tool" >/dev/null || fail "$tool not found (Debian/Ubuntu: apt-get install systemd)"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- 1. verify ----------------------------------------------------------------
root="$tmp/verify"
units=/usr/lib/systemd/system
[ -d "$units" ] || units=/lib/systemd/system
[ -d "$units" ] || fail "no system unit directory (/usr/lib/systemd/system)"
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/usr/local/bin" "$root/bin"
cp -a "$units" "$root/usr/lib/systemd/system"
cp "$(type -P kill || echo /bin/kill)" "$root/bin/kill"
printf '#!/bin/sh\n# stub for systemd-analyze verify\nexit 0\n' >"$root/usr/local/bin/inboxd"
chmod 0755 "$root/usr/local/bin/inboxd"
install -m 0644 "$unit" "$root/etc/systemd/system/inboxd.service"
out=$(systemd-analyze verify --man=no --root="$root" inboxd.service 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify printed warnings:
$out"
echo "check.sh: ok: systemd-analyze verify inboxd.service"

# --- 2. security --------------------------------------------------------------
report=$(systemd-analyze security --offline=yes --threshold="$max_exposure" "$unit" 2>&1) && rc=0 || rc=$?
score=$(printf '%s\n' "$report" | sed -n 's/.*Overall exposure level for inboxd.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "no exposure level in systemd-analyze security output:
$report"
if [ "$rc" -ne 0 ]; then
  printf '%s\n' "$report" | grep -v '^✓' >&2 || true
  fail "exposure level $score is above 2.5"
fi
echo "check.sh: ok: systemd-analyze security --offline=yes: exposure $score (at most 2.5)"

# --- 3. install steps (sysusers.d, tmpfiles.d) ----------------------------------
if [ "$(id -u)" -ne 0 ]; then
  echo "check.sh: SKIP: sysusers/tmpfiles install steps need root (chown)"
  exit 0
fi
root="$tmp/install"
install -D -m 0644 "$here/inboxd.sysusers" "$root/etc/sysusers.d/inboxd.conf"
install -D -m 0644 "$here/inboxd.tmpfiles" "$root/etc/tmpfiles.d/inboxd.conf"
systemd-sysusers --root="$root" inboxd.conf >/dev/null 2>&1 || fail "systemd-sysusers --root: $(systemd-sysusers --root="$root" inboxd.conf 2>&1)"
uid=$(awk -F: '$1 == "inboxd" {print $3}' "$root/etc/passwd")
gid=$(awk -F: '$1 == "inboxd" {print $3}' "$root/etc/group")
[ -n "$uid" ] || fail "systemd-sysusers created no user inboxd"
[ -n "$gid" ] || fail "systemd-sysusers created no group inboxd"
awk -F: -v g="$gid" '$1 == "inboxd" && $4 == g && $7 ~ /nologin$/ {ok=1} END {exit !ok}' "$root/etc/passwd" ||
  fail "user inboxd: want primary group inboxd and a nologin shell: $(grep '^inboxd:' "$root/etc/passwd")"
systemd-tmpfiles --create --root="$root" inboxd.conf || fail "systemd-tmpfiles --create --root"
[ "$(stat -c '%a %u %g' "$root/etc/inboxd")" = "750 0 $gid" ] ||
  fail "/etc/inboxd: want 750 0 $gid, got $(stat -c '%a %u %g' "$root/etc/inboxd")"
# What `install -m 0640 -o root -g inboxd …` does on the host; a later
# systemd-tmpfiles run puts a loosened mode back.
install -m 0644 "$here/inboxd.env" "$root/etc/inboxd/inboxd.env"
systemd-tmpfiles --create --root="$root" inboxd.conf || fail "systemd-tmpfiles --create --root (second run)"
[ "$(stat -c '%a %u %g' "$root/etc/inboxd/inboxd.env")" = "640 0 $gid" ] ||
  fail "/etc/inboxd/inboxd.env: want 640 0 $gid, got $(stat -c '%a %u %g' "$root/etc/inboxd/inboxd.env")"
echo "check.sh: ok: systemd-sysusers and systemd-tmpfiles --create in a --root tree (uid $uid, gid $gid)"
