#!/usr/bin/env bash
# System packages the test suite needs beyond PyPI. Runs as part of `make install`;
# idempotent and quiet when everything is already present.
set -euo pipefail
need=()
# Java 17+ for PySpark (issue: Spark data source). Only when the spark extra is in use.
if [ "${KJBOD_NEED_JAVA:-0}" = "1" ] && ! command -v java >/dev/null 2>&1; then
    need+=(openjdk-17-jre-headless)
fi
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = "0" ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
    else
        echo "kjbod: please install: ${need[*]}" >&2
    fi
fi
