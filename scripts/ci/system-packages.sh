#!/usr/bin/env bash
# The engines the tests start on loopback, from Debian's packages: bubblewrap and libseccomp2 (the sandbox for
# model-written code), PostgreSQL (a team's store), Slurm with munge (a single-node cluster) and
# chromium (browser tests). As root only; elsewhere, tests that need a missing engine skip with
# the reason.
set -euo pipefail
pkgs=(bubblewrap libseccomp2 postgresql slurm-wlm munge chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present (${pkgs[*]})" >&2
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system packages: not installed (not root or no apt-get): ${missing[*]}; their tests will skip" >&2
  exit 0
fi
echo "system packages: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
