#!/usr/bin/env bash
# deps.sh: installs the Debian packages the build and tests need, only those
# missing (idempotent; silent when everything is there).
set -euo pipefail
pkgs=(cmake ninja-build g++ git libeigen3-dev libcli11-dev libfmt-dev libyaml-cpp-dev
      nlohmann-json3-dev libbenchmark-dev libgtest-dev python3-jsonschema)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps.sh: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
