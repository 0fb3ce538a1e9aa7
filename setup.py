"""The one native part of kjbod: the record scanner behind kjbod.storage.records (optional: when it cannot be
built, the pure-Python scanner gives the same answers, more slowly)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kjbod.storage._recordscan", ["kjbod/storage/_recordscan.c"], optional=True,
                  extra_compile_args=["-O2"]),
    ],
)
