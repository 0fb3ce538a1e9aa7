"""kjbod on Spark: the `kjbod` PySpark data source and the `kjbod analyze` pipeline (the `spark` extra).

    spark.read.format("kjbod").option("bootstrap.servers", "127.0.0.1:9092").load()

Strategy: nothing here is imported by the rest of kjbod, and this package imports pyspark only when one of its
names is used (`KjbodDataSource`, `schema_for`), so kjbod works without the extra.  `kjbod.spark.snapshot`
(options, the per-broker fetch, Arrow columns) does not need pyspark at all.  Installing kjbod also installs the
top-level module `pyspark_kjbod`, through which PySpark 4 registers the source by itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KjbodDataSource", "schema_for"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kjbod.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'kjbod.spark' has no attribute {name!r}")
