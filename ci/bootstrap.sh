#!/usr/bin/env bash
# Install what a fresh machine lacks to run the nox sessions, and change nothing that is there:
#   - nox and uv from PyPI (with the Python that runs this script: $PYTHON or python3);
#   - shellcheck (the lint session) and bubblewrap (the isolated e2e runs) from Debian's packages,
#     when running as root on a machine with apt-get.
set -euo pipefail

python=${PYTHON:-python3}
missing=()
command -v nox >/dev/null 2>&1 || missing+=(nox)
command -v uv >/dev/null 2>&1 || missing+=(uv)
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]} from PyPI" >&2
  "$python" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi

packages=()
command -v shellcheck >/dev/null 2>&1 || packages+=(shellcheck)
command -v bwrap >/dev/null 2>&1 || packages+=(bubblewrap)
if ((${#packages[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${packages[*]} with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  else
    echo "bootstrap: ${packages[*]} missing and cannot be installed here (need root and apt-get);" \
      "install them with your package manager" >&2
    exit 1
  fi
fi
