"""The C extensions (csrc/): the supervisor's row checks, gathers and answers, and
the env bridge's copies of the rows.

Everything else is in pyproject.toml; setuptools still needs this file for an
extension module.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "w3async.sync._rows",
            sources=["csrc/rows.c"],
            depends=["csrc/shape_arg.h", "shim/w3s_table.h"],
            include_dirs=["shim"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"],
        ),
        Extension(  # the env bridge's copies of the rows (w3async/env/rowcopies.py)
            "w3async.env._rowcopies",
            sources=["csrc/rowcopies.c"],
            depends=["csrc/shape_arg.h", "shim/w3s_table.h"],
            include_dirs=["shim"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"],
        ),
    ]
)
