#!/usr/bin/env bash
# Runs edge_test.py with Debian's python3 (python3-yaml comes with yamllint).
exec /usr/bin/python3 -I "$(dirname "$0")/edge_test.py" "$@"
