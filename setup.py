"""Builds otelloop's native reader (``otelloop._scan``); everything else is in pyproject.toml.

The extension is optional for ``pip install``: where no C compiler is available the install still
succeeds and otelloop uses the pure-Python reader, which gives the same results more slowly
(``otelloop --version`` says which reader runs). ``OTELLOOP_REQUIRE_NATIVE=1`` makes it mandatory, so
that a build which must ship the native reader (the container image, see ``scripts/build_wheel.sh``)
fails instead of silently falling back.
"""

import os

from setuptools import Extension, setup

REQUIRE_NATIVE = os.environ.get("OTELLOOP_REQUIRE_NATIVE", "") not in ("", "0")

setup(ext_modules=[Extension("otelloop._scan", ["otelloop/_scan.c"], optional=not REQUIRE_NATIVE,
                             extra_compile_args=["-O2", "-std=c11"])])
