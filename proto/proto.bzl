"""grpc_cc_proto: protoc + grpc_cpp_plugin through a genrule, then two cc_libraries:
<name>_messages (the messages alone: protobuf, no gRPC — what the scheduler core and the
plan contract link) and <name>_cc_proto (the messages plus the gRPC service stubs)."""

def grpc_cc_proto(name, proto, deps = []):
    base = proto[:-len(".proto")]
    outs = [
        base + ".pb.h",
        base + ".pb.cc",
        base + ".grpc.pb.h",
        base + ".grpc.pb.cc",
    ]
    native.genrule(
        name = name + "_gen",
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
        deps = ["@protobuf//:lib"] + deps,
    )
    native.cc_library(
        name = name + "_cc_proto",
        srcs = [base + ".grpc.pb.cc"],
        hdrs = [base + ".grpc.pb.h"],
        includes = ["."],
        copts = ["-Wno-unused-parameter"],
        deps = [":" + name + "_messages", "@grpc//:lib", "@protobuf//:lib"] + deps,
    )
