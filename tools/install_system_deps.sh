#!/usr/bin/env bash
# System packages the test suite needs beyond PyPI. Runs as part of `make install`;
# idempotent and quiet when everything is already present.
set -euo pipefail
need=()

# Java 17+ for PySpark (the `spark` extra: kjbod.spark and `kjbod analyze`). `make install` sets KJBOD_NEED_JAVA=1.
java_major() {
    # `java -version` prints e.g. 'openjdk version "17.0.15" 2025-04-15' (or "1.8.0_392" for Java 8) on stderr.
    java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\)\(\.\([0-9][0-9]*\)\)\{0,1\}.*/\1 \3/p' | head -n1 |
        awk '{ print ($1 == 1 ? $2 : $1) }'
}
java_ok() {
    command -v java >/dev/null 2>&1 || return 1
    local major
    major="$(java_major)"
    [ -n "$major" ] && [ "$major" -ge 17 ]
}
pick_jre() {
    # Debian's headless JRE: 17 where the release has it (bookworm), else a newer LTS (trixie ships 21).
    local pkg
    for pkg in openjdk-17-jre-headless openjdk-21-jre-headless openjdk-25-jre-headless; do
        if apt-cache show "$pkg" >/dev/null 2>&1; then
            echo "$pkg"
            return
        fi
    done
    echo default-jre-headless
}
if [ "${KJBOD_NEED_JAVA:-0}" = "1" ] && ! java_ok; then
    need+=(JRE)
fi

# FUSE for the hung/slow log dir live tests (tools/faultfs.py, a passthrough filesystem through mfusepy): fusermount3
# and libfuse3. Where FUSE cannot mount (no /dev/fuse, a container without the right), those tests skip and say so.
if ! command -v fusermount3 >/dev/null 2>&1 || ! ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so'; then
    need+=(fuse3 libfuse3-3)
fi

# Node.js and npm for the KafkaJS compatibility tests (tests/compat/kafkajs; `make install` runs npm ci there).
# Where node cannot be installed, those tests skip and say so.
if ! command -v node >/dev/null 2>&1; then
    need+=(nodejs npm)
elif ! command -v npm >/dev/null 2>&1; then
    need+=(npm)
fi

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != "0" ]; then
        echo "kjbod: please install ${need[*]/JRE/a Java 17+ runtime (Debian: openjdk-17-jre-headless)}" \
            "(the spark extra needs Java; the hung-disk tests need fuse3 and libfuse3-3; the KafkaJS tests need" \
            "nodejs and npm)" >&2
        exit 0
    fi
    apt-get update -qq
    packages=()
    for item in "${need[@]}"; do
        if [ "$item" = JRE ]; then packages+=("$(pick_jre)"); else packages+=("$item"); fi
    done
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
    if [ "${KJBOD_NEED_JAVA:-0}" = "1" ] && ! java_ok; then
        echo "kjbod: installed ${packages[*]} but 'java' is still not a Java 17+ runtime on PATH" >&2
        exit 1
    fi
fi
