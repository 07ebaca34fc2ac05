#!/usr/bin/env bash
# Regenerates weft/v1/generate_pb2*.py from proto/ with Debian's protoc and
# grpc_python_plugin (protobuf 3.21 / grpcio 1.51). //clients/python:stubs_test fails
# when the committed stubs differ from what this produces.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
/usr/bin/protoc --proto_path="$root/proto" --python_out="$root/clients/python" \
  --grpc_python_out="$root/clients/python" \
  --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin \
  "$root/proto/weft/v1/generate.proto"
