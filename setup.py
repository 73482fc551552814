"""Builds otelloop's optional native reader (``otelloop._scan``); everything else is in pyproject.toml.

The extension is optional: where no C compiler is available the install still succeeds and otelloop
uses the pure-Python reader, which gives the same results more slowly (``otelloop --version`` says which).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("otelloop._scan", ["otelloop/_scan.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c11"])])
