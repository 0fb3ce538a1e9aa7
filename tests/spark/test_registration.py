"""Auto-registration without Spark's JVM: run PySpark's own lookup worker code the way Spark's worker does.

Spark registers the `DefaultSource` of every top-level `pyspark_*` module its workers can import.  This runs the
lookup in a fresh interpreter, from a directory outside the source tree and without PYTHONPATH, so it only
passes when the installed package ships `pyspark_kjbod`.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import io, pickle, struct
from pyspark.sql.worker import lookup_data_sources
out = io.BytesIO()
lookup_data_sources._main(io.BytesIO(), out)
buf = out.getvalue()
(count,) = struct.unpack_from(">i", buf, 0)
pos, found = 4, {}
for _ in range(count):
    (n,) = struct.unpack_from(">i", buf, pos); name = buf[pos + 4:pos + 4 + n].decode(); pos += 4 + n
    (n,) = struct.unpack_from(">i", buf, pos); cls = pickle.loads(buf[pos + 4:pos + 4 + n]); pos += 4 + n
    found[name] = f"{cls.__module__}.{cls.__qualname__}"
print(found.get("kjbod"))
"""


def test_pyspark_lookup_finds_kjbod(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kjbod.spark.source.KjbodDataSource"
