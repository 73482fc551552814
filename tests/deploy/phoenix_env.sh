#!/usr/bin/env bash
# Creates (or reuses) the separate virtualenv that holds Arize Phoenix for tests/deploy/test_phoenix.py.
#
# Phoenix pins many packages (SQLAlchemy, fastapi, strawberry, ...), so it never goes into otelloop's own
# environment: it gets a venv of its own at ${OTELLOOP_PHOENIX_VENV:-/tmp/otelloop-phoenix-venv}
# (about 70 s and 850 MB on a fresh machine; a few seconds when the venv is already there).
# The test finds Phoenix through the same variable, so export it if you choose another path.
#
#   bash tests/deploy/phoenix_env.sh            # create or reuse
#   OTELLOOP_PHOENIX_VENV=/opt/phx bash tests/deploy/phoenix_env.sh
set -euo pipefail

VENV="${OTELLOOP_PHOENIX_VENV:-/tmp/otelloop-phoenix-venv}"
PYTHON="${OTELLOOP_PHOENIX_PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

VERSION='import importlib.metadata as m; print("arize-phoenix", m.version("arize-phoenix"))'
if [ -x "$VENV/bin/phoenix" ] && installed="$("$VENV/bin/python" -c "$VERSION" 2>/dev/null)"; then
  echo "phoenix_env: reusing $VENV ($installed)"
  exit 0
fi

echo "phoenix_env: installing arize-phoenix into $VENV"
"$PYTHON" -m venv "$VENV"
# -qq: errors only (this machine's pip config names local mirror folders that may be absent)
"$VENV/bin/python" -m pip install -qq -U pip
"$VENV/bin/python" -m pip install -qq arize-phoenix
"$VENV/bin/phoenix" --help >/dev/null
echo "phoenix_env: ready ($("$VENV/bin/python" -c "$VERSION"))"
