"""The C extension (csrc/): the supervisor's row checks, gathers and answers.

Everything else is in pyproject.toml; setuptools still needs this file for an
extension module.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "w3async.sync._rows",
            sources=["csrc/rows.c"],
            include_dirs=["shim"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"],
        )
    ]
)
