#!/usr/bin/env bash
# Make sure a Java runtime (17 or newer) is present for the Spark tests; install one if not.
set -euo pipefail
major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }
if command -v java >/dev/null 2>&1 && [ "$(major)" -ge 17 ] 2>/dev/null; then
    exit 0
fi
echo "ensure-java: no Java 17+ found; installing a headless JDK from the distribution" >&2
if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless \
        || $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless
else
    echo "ensure-java: no apt-get here; install Java 17+ by hand for the Spark tests" >&2
    exit 1
fi
java -version
