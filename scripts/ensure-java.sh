#!/usr/bin/env bash
# Make sure a Java runtime (17 or newer) is present for the Spark tests; install one if not.
# Works on a fresh Debian/Ubuntu machine (as root or with sudo); elsewhere it says what to do.
set -euo pipefail

java_bin() {
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
        echo "$JAVA_HOME/bin/java"
    else
        command -v java || true
    fi
}
major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }

JAVA="$(java_bin)"
if [ -n "$JAVA" ] && [ "$(major "$JAVA")" -ge 17 ] 2>/dev/null; then
    exit 0
fi
echo "ensure-java: no Java 17+ found; installing a headless JRE from the distribution" >&2
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-java: no apt-get here; install Java 17+ by hand (or set JAVA_HOME) for Spark" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "ensure-java: not root and no sudo; install openjdk-17-jre-headless by hand" >&2
        exit 1
    fi
    SUDO="sudo"
fi
# Slim Debian images drop /usr/share/man, and the JRE's postinst fails without man1.
$SUDO mkdir -p /usr/share/man/man1
$SUDO apt-get update -qq
apt_install() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; }
# Debian 12 has openjdk-17; Debian 13 and newer have 21+ as the default JRE.
apt_install openjdk-17-jre-headless || apt_install default-jre-headless
hash -r
JAVA="$(java_bin)"
if [ -z "$JAVA" ] || ! [ "$(major "$JAVA")" -ge 17 ] 2>/dev/null; then
    echo "ensure-java: installed a JRE but found no Java 17+ on PATH" >&2
    exit 1
fi
"$JAVA" -version
