"""The llama.cpp source subset that tools/bootstrap.sh extracts from PyPI's
llama-cpp-python 0.3.36 sdist (sha256-pinned) into the cache directory.

Nothing of it is in this repository. `llama_cpp_repository` points Bazel at the extracted
folder (offline; it fails with a clear message when tools/bootstrap.sh has not run) and
declares:
  @llama_cpp//:jinja      llama.cpp's Jinja engine (common/jinja, MIT), with the two
                          common/ files it needs (json, unicode) and the vendored
                          nlohmann/json; headers as "jinja/runtime.h" etc. and "json.h"
  @llama_cpp//:vocabs     models/ggml-vocab-*.gguf and their .inp/.out test pairs
  @llama_cpp//:templates  models/templates/*.jinja (real models' chat templates)
Tests find the data through the runfiles path of @llama_cpp//:LICENSE (see
common/testing/llama_cpp_data.h).
"""

_VERSION = "0.3.36"
_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

# common/json.cpp includes ggml.h only for GGML_ASSERT (nlohmann's JSON_ASSERT).
_GGML_SHIM = """// Written by third_party/llama_cpp.bzl: json.cpp needs GGML_ASSERT only.
#pragma once
#include <cstdio>
#include <cstdlib>
#define GGML_ASSERT(x) do { if (!(x)) { std::fprintf(stderr, "assert failed: %s\\n", #x); std::abort(); } } while (0)
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

licenses(["notice"])  # MIT (LICENSE)

exports_files(["LICENSE"])

cc_library(
    name = "jinja",
    srcs = glob(["common/jinja/*.cpp"]) + [
        "common/json.cpp",
        "common/unicode.cpp",
        "common/unicode.h",
        "shim/ggml.h",
    ] + glob(["vendor/nlohmann/*.hpp"]),
    hdrs = glob(["common/jinja/*.h"]) + ["common/json.h"],
    copts = [
        "-fexceptions",
        "-w",
        "-Iexternal/llama_cpp/common",
        "-Iexternal/llama_cpp/vendor",
        "-Iexternal/llama_cpp/shim",
    ],
    strip_include_prefix = "common",
)

filegroup(
    name = "vocabs",
    srcs = glob(["models/ggml-vocab-*"]),
)

filegroup(
    name = "templates",
    srcs = glob(["models/templates/*.jinja"]),
)
"""

def _impl(ctx):
    cache = ctx.os.environ.get("WEFT_CACHE_DIR", "")
    if not cache:
        cache = ctx.os.environ.get("HOME", "") + "/.cache/weft"
    root = "%s/llama-cpp-python-%s" % (cache, _VERSION)
    stamp = ctx.path(root + "/.weft-sha256")
    if not stamp.exists or ctx.read(stamp).strip() != _SHA256:
        fail(("the llama.cpp source subset of llama-cpp-python %s is missing from %s " +
              "(or came from another sdist): run tools/bootstrap.sh") % (_VERSION, root))
    for part in ["LICENSE", "common", "vendor", "models"]:
        ctx.symlink(root + "/" + part, part)
    ctx.file("shim/ggml.h", _GGML_SHIM)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD", _BUILD)

llama_cpp_repository = repository_rule(
    implementation = _impl,
    environ = ["WEFT_CACHE_DIR", "HOME"],
    local = True,
)
