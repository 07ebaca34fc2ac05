#!/usr/bin/env bash
# Runs client_test.py with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf:
# tools/bootstrap.sh installs them).
set -uo pipefail
exec /usr/bin/python3 -I "$(dirname "$0")/client_test.py" "$(dirname "$0")"
