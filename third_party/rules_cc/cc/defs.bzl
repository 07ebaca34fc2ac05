"""Offline stand-in for @rules_cc: every rule forwards to the native one.

Bazel 4.2.3's @bazel_tools loads @rules_cc//cc:defs.bzl; Debian's bazel-rules-cc needs
Bazel >= 5, so this stub keeps the build offline (see ../shared/notes/bazel-offline.md).
"""

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_import(**kwargs):
    native.cc_import(**kwargs)

def cc_proto_library(**kwargs):
    native.cc_proto_library(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)

def objc_library(**kwargs):
    native.objc_library(**kwargs)

def objc_import(**kwargs):
    native.objc_import(**kwargs)
