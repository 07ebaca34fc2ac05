"""Build rules for CUDA code (compile-only on machines without a GPU).

cuda_library: each .cu file is compiled by nvcc in its own genrule into a static archive
(relocatable device code off, -fPIC host code), for every architecture in CUDA_ARCHS
(one with --config=cuda_ci);
the archives and the plain-C++ headers form a cc_library. C++ callers include the
headers (no CUDA syntax in them) and link @cuda//:cudart.
cuda_cc_library / cuda_cc_test / cuda_cc_binary: ordinary C++ targets that exist only
in a --config=cuda build (target_compatible_with), so `bazel build //...` and
`bazel test //...` skip them as incompatible in the default build.
GPU tests carry tags = ["gpu"] (test.sh runs them with --config=cuda) and skip, counted
as skipped, when no device is present.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# SASS for Ampere (A100) and Hopper (H100/H200), and PTX for the newest of them: what a
# release (--config=cuda) ships. The driver JIT-compiles the PTX on a newer GPU (Blackwell
# and later), so a card we did not build for still runs. tools/ptx_check.sh checks it.
CUDA_ARCHS = ["80", "90"]
CUDA_PTX_ARCH = CUDA_ARCHS[-1]

def _gencode(arch, ptx):
    sass = "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch)
    return sass + (" -gencode=arch=compute_%s,code=compute_%s" % (arch, arch) if ptx else "")

# --define=cuda_arch=sm_90 (--config=cuda_ci, ./test.sh) compiles for Hopper only, with its
# PTX (so the check above runs in CI): the same code checked at about 60 % of the nvcc
# time on 2 cores; not for release.
CUDA_GENCODE = select({
    "//:cuda_arch_sm_90": _gencode("90", True),
    "//conditions:default": " ".join([
        _gencode(arch, arch == CUDA_PTX_ARCH)
        for arch in CUDA_ARCHS
    ]),
})

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "-lineinfo",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-fno-omit-frame-pointer",
    "--expt-relaxed-constexpr",
    "-Werror=all-warnings",
    # Several .cu files may compile at once on a small machine: one thread each.
    "--threads=1",
]

CUDA_COMPATIBLE = select({
    "//:cuda_enabled": [],
    "//conditions:default": ["@platforms//:incompatible"],
})

def cuda_library(name, srcs, hdrs = [], cu_hdrs = [], deps = [], visibility = None, **kwargs):
    """A cc_library whose .cu srcs are compiled by nvcc.

    Args:
      name: target name.
      srcs: .cu files (one nvcc action each).
      hdrs: plain C++ headers exported to callers (also visible to the .cu files).
      cu_hdrs: device-only headers (.cuh) included by the .cu files.
      deps: cc deps of the callers (header-only deps the .cu files include must also be
        listed in cu_hdrs, since nvcc does not see Bazel's include paths).
      visibility: as usual.
      **kwargs: passed to the cc_library.
    """
    archives = []
    for src in srcs:
        stem = src[:-len(".cu")].replace("/", "_")
        out = "_nvcc/%s/%s.a" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + cu_hdrs,
            outs = [out],
            cmd = " ".join([NVCC] + NVCC_FLAGS) + " " + CUDA_GENCODE + " " + " ".join([
                "-I.",
                "-I$(GENDIR)",
                "-lib",
                "$(location %s)" % src,
                "-o $@",
            ]),
            target_compatible_with = CUDA_COMPATIBLE,
            visibility = ["//visibility:private"],
            message = "nvcc %s" % src,
        )
        archives.append(out)
    native.cc_library(
        name = name,
        srcs = archives,
        hdrs = hdrs,
        linkstatic = True,
        target_compatible_with = CUDA_COMPATIBLE,
        visibility = visibility,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )

def cuda_cc_library(name, **kwargs):
    """A C++ library that exists only in --config=cuda builds."""
    native.cc_library(name = name, target_compatible_with = CUDA_COMPATIBLE, **kwargs)

def cuda_cc_binary(name, **kwargs):
    """A C++ binary that exists only in --config=cuda builds."""
    native.cc_binary(name = name, target_compatible_with = CUDA_COMPATIBLE, **kwargs)

def cuda_cc_test(name, tags = [], size = "small", **kwargs):
    """A GPU test: built only with --config=cuda, tagged "gpu", skips without a device."""
    native.cc_test(
        name = name,
        size = size,
        tags = tags + ["gpu"],
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )
