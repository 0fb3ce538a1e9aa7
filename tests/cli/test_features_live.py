"""`kjbod features` (kafka-features.sh) against a real node: describe, a downgrade and upgrade of metadata.version
through UpdateFeatures, refusals, and the level kept across a restart."""

from __future__ import annotations

import subprocess
import sys

KJBOD = [sys.executable, "-m", "kjbod"]


def features(server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, "features", "--bootstrap-server", server.bootstrap, *args], capture_output=True,
                          text=True, timeout=120)


def described(server, feature: str = "metadata.version") -> dict[str, str]:
    done = features(server, "describe")
    assert done.returncode == 0, done.stderr
    lines = [dict(field.split(": ", 1) for field in line.split("\t")) for line in done.stdout.splitlines()]
    assert [d["Feature"] for d in lines] == ["kraft.version", "metadata.version"]
    (found,) = [d for d in lines if d["Feature"] == feature]
    return found


def test_describe_downgrade_upgrade_and_refusals(kjbod_server_factory):
    server = kjbod_server_factory()
    first = described(server)
    assert {k: v for k, v in first.items() if k != "Epoch"} == {
        "Feature": "metadata.version", "SupportedMinVersion": "3.7-IV2", "SupportedMaxVersion": "3.9-IV0",
        "FinalizedVersionLevel": "3.9-IV0"}
    assert int(first["Epoch"]) >= 0
    kraft = described(server, "kraft.version")  # a static quorum: supported 0-1, finalized 0 (Kafka 3.9's answer)
    assert {k: v for k, v in kraft.items() if k != "Epoch"} == {
        "Feature": "kraft.version", "SupportedMinVersion": "0", "SupportedMaxVersion": "1",
        "FinalizedVersionLevel": "0"}

    dry = features(server, "downgrade", "--metadata", "3.8", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "metadata.version can be downgraded to 20.\n")
    assert described(server)["FinalizedVersionLevel"] == "3.9-IV0"
    down = features(server, "downgrade", "--metadata", "3.8")
    assert (down.returncode, down.stdout) == (0, "metadata.version was downgraded to 20.\n")
    after = described(server)
    assert after["FinalizedVersionLevel"] == "3.8-IV0" and int(after["Epoch"]) > int(first["Epoch"])

    refused = features(server, "upgrade", "--metadata", "3.7")
    assert refused.returncode == 1
    first_line, last_line = refused.stdout.splitlines()
    assert first_line.startswith(
        "Could not upgrade metadata.version to 19. Invalid update version 19 for feature metadata.version. Can't "
        "downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
        "downgrade.")
    assert last_line == "1 out of 1 operation(s) failed."
    unknown = features(server, "upgrade", "--feature", "group.version=1")
    assert unknown.returncode == 1 and "does not support this feature" in unknown.stdout
    bad = features(server, "upgrade", "--metadata", "4.2")
    assert bad.returncode == 2 and "unknown metadata.version '4.2'" in bad.stderr

    server.stop()  # the level is a record of the metadata log; the node registers again at it
    server.start()
    assert described(server)["FinalizedVersionLevel"] == "3.8-IV0"
    up = features(server, "upgrade", "--release-version", "3.9")
    assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 21.\n")
    assert described(server)["FinalizedVersionLevel"] == "3.9-IV0"

    mapping = subprocess.run([*KJBOD, "features", "--bootstrap-server", "127.0.0.1:1", "version-mapping",
                              "--release-version", "3.7-IV2"], capture_output=True, text=True, timeout=60)
    assert mapping.stdout == "metadata.version=17 (3.7-IV2)\n"
