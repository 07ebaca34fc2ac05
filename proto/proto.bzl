"""grpc_cc_proto: protoc + grpc_cpp_plugin through a genrule, then two cc_libraries:
<name>_messages (the messages alone: protobuf, no gRPC — what the scheduler core and the
plan contract link) and <name>_cc_proto (the messages plus the gRPC service stubs).
`visibility` is <name>_cc_proto's; <name>_messages is visible to those and to
`messages_visibility` too (who may link the messages but not gRPC). The genrule stays
private."""

def grpc_cc_proto(name, proto, deps = [], visibility = None, messages_visibility = []):
    base = proto[:-len(".proto")]
    outs = [
        base + ".pb.h",
        base + ".pb.cc",
        base + ".grpc.pb.h",
        base + ".grpc.pb.cc",
    ]
    native.genrule(
        name = name + "_gen",
        visibility = ["//visibility:private"],
        srcs = [proto],
        outs = outs,
        cmd = ("/usr/bin/protoc --proto_path=proto " +
               "--cpp_out=$(GENDIR)/proto --grpc_out=$(GENDIR)/proto " +
               "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin $(location %s)") % proto,
    )
    native.cc_library(
        name = name + "_messages",
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        includes = ["."],
        copts = ["-Wno-unused-parameter"],
        visibility = ((visibility or []) + messages_visibility) or None,
        deps = ["@protobuf//:lib"] + deps,
    )
    native.cc_library(
        name = name + "_cc_proto",
        srcs = [base + ".grpc.pb.cc"],
        hdrs = [base + ".grpc.pb.h"],
        includes = ["."],
        copts = ["-Wno-unused-parameter"],
        visibility = visibility,
        deps = [":" + name + "_messages", "@grpc//:lib", "@protobuf//:lib"] + deps,
    )
