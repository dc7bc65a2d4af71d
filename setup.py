"""The compiled record kernels, built by ``pip install`` (editable or not); the rest is in pyproject.toml.

Each module is one C file over the Python C API and the buffer protocol, no other library: any C compiler
and Python's headers build them (docs/architecture.md, "Compiled kernels").
"""

from setuptools import Extension, setup

_HEADER = "src/tierlog/records/kernels.h"


def _kernel(module: str) -> Extension:
    return Extension(f"tierlog.{module}", [f"src/tierlog/{module.replace('.', '/')}.c"], depends=[_HEADER])


setup(ext_modules=[_kernel(m) for m in ("records._validation", "records._scan", "storage._offset_map",
                                        "spark._columnar")])
