"""XGrammar's C++ core, from PyPI's xgrammar 0.2.8 sdist (sha256-pinned), which
tools/bootstrap.sh downloads into the cache directory and extracts there.

Nothing of it is in this repository. `xgrammar_repository` points Bazel at the extracted
folder (offline; it fails with a clear message when tools/bootstrap.sh has not run) and
declares @xgrammar//:xgrammar: the C++ core (cpp/**/*.cc without the TVM-FFI Python
bindings in cpp/tvm_ffi), its public headers as <xgrammar/...>, and the two header-only
dependencies it ships (3rdparty/picojson, 3rdparty/dlpack). Apache-2.0.

XGrammar reports errors with C++ exceptions: it is built with -fexceptions, and only
scheduler/grammar/ (which catches them at its boundary) includes its headers.
"""

_VERSION = "0.2.8"
_SHA256 = "8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80"

_BUILD = """
package(default_visibility = ["//visibility:public"])

licenses(["notice"])  # Apache-2.0 (LICENSE)

exports_files(["LICENSE", "NOTICE"])

cc_library(
    name = "xgrammar",
    srcs = glob(
        ["cpp/**/*.cc", "cpp/**/*.h"],
        exclude = ["cpp/tvm_ffi/**"],
    ),
    hdrs = glob(["include/xgrammar/*.h"]) + [
        "3rdparty/picojson/picojson.h",
        "3rdparty/dlpack/include/dlpack/dlpack.h",
    ],
    copts = [
        "-fexceptions",
        "-w",
        "-Iexternal/xgrammar/cpp",
    ],
    defines = ["XGRAMMAR_ENABLE_CPPTRACE=0"],
    includes = [
        "3rdparty/dlpack/include",
        "3rdparty/picojson",
        "include",
    ],
    linkopts = ["-lpthread"],
)
"""

def _impl(ctx):
    cache = ctx.os.environ.get("WEFT_CACHE_DIR", "")
    if not cache:
        cache = ctx.os.environ.get("HOME", "") + "/.cache/weft"
    root = "%s/xgrammar-%s" % (cache, _VERSION)
    stamp = ctx.path(root + "/.weft-sha256")
    if not stamp.exists or ctx.read(stamp).strip() != _SHA256:
        fail(("XGrammar %s's C++ core is missing from %s (or came from another sdist): " +
              "run tools/bootstrap.sh") % (_VERSION, root))
    for part in ["LICENSE", "NOTICE", "cpp", "include", "3rdparty"]:
        ctx.symlink(root + "/" + part, part)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD", _BUILD)

xgrammar_repository = repository_rule(
    implementation = _impl,
    environ = ["WEFT_CACHE_DIR", "HOME"],
    local = True,
)
