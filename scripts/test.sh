#!/usr/bin/env bash
# Tests: set up/update .venv, make sure Debian's Chromium is there for the browser test, run pytest.
# Extra arguments go to pytest, e.g.  bash scripts/test.sh tests/test_sim.py -x
source "$(dirname "$0")/_env.sh" dev
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium for the browser test..."
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/tmp/flexpipe-apt.log 2>&1 \
        || echo "warning: could not install chromium (see /tmp/flexpipe-apt.log)"
fi
exec python -m pytest -q -ra "$@"
