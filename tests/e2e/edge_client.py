"""Python checks of weft-scheduler's edge, run by the e2e tests with Debian's
/usr/bin/python3 (python3-grpcio) and the vendorable client in clients/python.

  edge_client.py --client_dir=DIR --server=HOST:PORT call [--ca=FILE --token=T --model=M]
      The client package over TLS with a bearer token: ListModels, health of the model's
      service, a greedy generation; without the token: UNAUTHENTICATED.
  edge_client.py --client_dir=DIR --server=HOST:PORT reflection [--ca=FILE --model=M]
      Server reflection (grpc.reflection.v1alpha, the protocol grpcurl and grpc_cli
      speak; their Python package is not in Debian, so the messages are built here from
      a descriptor in a private pool): the listed services include grpc.health.v1.Health,
      and the file that defines it describes Check and Watch.
Every check is an assert; "edge_client: ok" on stderr at the end.
"""

import argparse
import sys


def reflection_types():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="weft_test/reflection_subset.proto",
                                             package="grpc.reflection.v1alpha", syntax="proto2")

    def message(name, fields):
        m = fdp.message_type.add(name=name)
        for field_name, number, ftype, label, type_name in fields:
            m.field.add(name=field_name, number=number, type=ftype, label=label,
                        type_name=type_name)

    opt, rep = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    s, b, m, i = f.TYPE_STRING, f.TYPE_BYTES, f.TYPE_MESSAGE, f.TYPE_INT32
    p = ".grpc.reflection.v1alpha."
    message("ServerReflectionRequest", [("host", 1, s, opt, None),
                                        ("file_containing_symbol", 4, s, opt, None),
                                        ("list_services", 7, s, opt, None)])
    message("ServiceResponse", [("name", 1, s, opt, None)])
    message("ListServiceResponse", [("service", 1, m, rep, p + "ServiceResponse")])
    message("FileDescriptorResponse", [("file_descriptor_proto", 1, b, rep, None)])
    message("ErrorResponse", [("error_code", 1, i, opt, None), ("error_message", 2, s, opt, None)])
    message("ServerReflectionResponse", [
        ("valid_host", 1, s, opt, None),
        ("file_descriptor_response", 4, m, opt, p + "FileDescriptorResponse"),
        ("list_services_response", 6, m, opt, p + "ListServiceResponse"),
        ("error_response", 7, m, opt, p + "ErrorResponse")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    factory = message_factory.MessageFactory(pool)
    get = lambda n: factory.GetPrototype(pool.FindMessageTypeByName("grpc.reflection.v1alpha." + n))
    return get("ServerReflectionRequest"), get("ServerReflectionResponse")


def check_reflection(channel, model):
    import grpc
    from google.protobuf import descriptor_pb2
    Req, Resp = reflection_types()
    call = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=lambda r: r.SerializeToString(),
        response_deserializer=Resp.FromString)
    md = [("x-weft-model", model)] if model else []
    replies = list(call(iter([Req(list_services=""),
                              Req(file_containing_symbol="grpc.health.v1.Health")]),
                        timeout=30, metadata=md))
    assert len(replies) == 2, replies
    services = sorted(s.name for s in replies[0].list_services_response.service)
    print("reflection lists: " + " ".join(services), file=sys.stderr)
    for want in ("grpc.health.v1.Health", "weft.v1.Generation",
                 "grpc.reflection.v1alpha.ServerReflection"):
        assert want in services, (want, services)
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in replies[1].file_descriptor_response.file_descriptor_proto]
    health = [svc for fd in files for svc in fd.service if fd.package == "grpc.health.v1"]
    assert health and sorted(m.name for m in health[0].method) == ["Check", "Watch"], files
    del grpc


def check_call(args):
    import grpc
    from weft.client import Client
    ca = open(args.ca, "rb").read() if args.ca else None
    with Client(args.server, model=args.model, token=args.token, root_certificates=ca,
                timeout=120) as client:
        models = client.list_models()
        assert [m.name for m in models] == [args.model], models
        assert client.health() == "SERVING"
        assert client.health(args.model) == "SERVING"
        assert client.health("weft.v1.Generation") == "SERVING"
        out = client.complete("The capital of France is", max_tokens=6, temperature=0,
                              ignore_eos=True)
        assert len(out.token_ids[0]) == 6 and out.finish_reason == "FINISH_REASON_LENGTH", out
        print("greedy_tokens: " + " ".join(str(t) for t in out.token_ids[0]))
    with Client(args.server, model=args.model, root_certificates=ca, timeout=30) as anonymous:
        try:
            anonymous.complete("x", max_tokens=1)
            raise AssertionError("a call without a token went through")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
            assert args.token not in e.details(), "the message echoes the token"
        assert anonymous.health() == "SERVING"  # health needs no token


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client_dir", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--ca", default="")
    ap.add_argument("--token", default="")
    ap.add_argument("--model", default="")
    ap.add_argument("what", choices=["call", "reflection"])
    args = ap.parse_args()
    sys.path.insert(0, args.client_dir)
    import grpc
    print("python %s, grpcio %s" % (sys.version.split()[0], grpc.__version__), file=sys.stderr)
    if args.what == "call":
        check_call(args)
    else:
        if args.ca:
            channel = grpc.secure_channel(
                args.server, grpc.ssl_channel_credentials(open(args.ca, "rb").read()))
        else:
            channel = grpc.insecure_channel(args.server)
        check_reflection(channel, args.model)
    print("edge_client: ok", file=sys.stderr)


if __name__ == "__main__":
    main()
