#!/usr/bin/env bash
# Make sure the Debian packages named on the command line are installed; install the missing
# ones (as root or with sudo). Used by `make test` for what the PHP client's tests and the
# browser tests need (php-cli, php-curl, phpunit, chromium, chromium-driver); elsewhere it says
# what to install by hand.
set -euo pipefail

missing=()
for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0
echo "ensure-debian: installing ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-debian: no apt-get here; install by hand: ${missing[*]}" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "ensure-debian: not root and no sudo; install by hand: ${missing[*]}" >&2
        exit 1
    fi
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
