"""kjbod's native parts, both optional: the record scanner behind kjbod.storage.records (when it cannot be built,
the pure-Python scanner gives the same answers, more slowly) and a log dir's append writer thread behind
kjbod.storage.native (without it every append goes through the dir's worker)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kjbod.storage._recordscan", ["kjbod/storage/_recordscan.c"], optional=True,
                  extra_compile_args=["-O2"]),
        Extension("kjbod.storage._nativewrite", ["kjbod/storage/_nativewrite.c"], optional=True,
                  extra_compile_args=["-O2"], extra_link_args=["-pthread"]),
    ],
)
