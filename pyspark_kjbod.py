"""Auto-registration shim: PySpark 4 registers the `DefaultSource` of every top-level `pyspark_*` module it finds.

With kjbod installed (its `spark` extra), `spark.read.format("kjbod")` works with no `spark.dataSource.register`
call: Spark's `lookup_data_sources` worker imports this module and registers `DefaultSource` under its `name()`.
The data source itself lives in `kjbod.spark.source`; this file only points at it.
"""

from kjbod.spark.source import KjbodDataSource

DefaultSource = KjbodDataSource

__all__ = ["DefaultSource"]
