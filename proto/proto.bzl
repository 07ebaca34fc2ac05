"""grpc_cc_proto: protoc + grpc_cpp_plugin through a genrule, then a cc_library."""

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
        name = name + "_cc_proto",
        srcs = [base + ".pb.cc", base + ".grpc.pb.cc"],
        hdrs = [base + ".pb.h", base + ".grpc.pb.h"],
        includes = ["."],
        copts = ["-Wno-unused-parameter"],
        deps = ["@grpc//:lib", "@protobuf//:lib"] + deps,
    )
