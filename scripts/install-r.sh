#!/usr/bin/env bash
# Install R 4.2 and the R packages the cross-checks use, from Debian's packages.
# Skips the install when every package is already there.
set -euo pipefail
pkgs=(r-base-core r-cran-proc r-cran-rms r-cran-th.data r-cran-survival r-cran-ranger r-cran-jsonlite)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing R packages from Debian: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
