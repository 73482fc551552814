#!/bin/sh
# Builds the wheels of otelloop's container image into DIR (default: dist): otelloop itself with the
# native reader compiled in, and every dependency, so that the runtime stage installs them with no
# compiler and no package index. The Dockerfile's build stage runs it, and so does
# tests/deploy/test_image.py, so the test builds exactly what the image gets.
#
#   sh scripts/build_wheel.sh /wheels
#
# Needs a C compiler and the Python headers. The native reader is mandatory here: a compiler problem
# fails the build (OTELLOOP_REQUIRE_NATIVE, read by setup.py), and a wheel without the extension is
# refused, rather than an image that quietly runs the pure-Python reader.
set -eu

out="${1:-dist}"
OTELLOOP_REQUIRE_NATIVE=1 python -m pip wheel --wheel-dir "$out" .

python - "$out" <<'PY'
import pathlib
import sys
import zipfile

wheels = sorted(pathlib.Path(sys.argv[1]).glob("otelloop-*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected one otelloop wheel in {sys.argv[1]}, found {[w.name for w in wheels]}")
names = zipfile.ZipFile(wheels[0]).namelist()
for module, what in (("_scan", "native reader"), ("_keys", "native key search"), ("_progress", "native progress tracker")):
    native = [n for n in names if n.startswith(f"otelloop/{module}.") and n.endswith(".so")]
    if not native:
        sys.exit(f"{wheels[0].name} has no {what} (otelloop/{module}*.so): the image would run the slow one")
    print(f"{wheels[0].name}: {what} {native[0]}")
PY
