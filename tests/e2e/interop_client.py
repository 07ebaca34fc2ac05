"""Python interop client for weft-scheduler (run by python_interop_test.cc).

Drives the public API from Debian's python3-grpcio with stubs generated from proto/
(protoc + grpc_python_plugin, see BUILD.bazel): ListModels, grpc.health.v1 Check,
Generate (greedy, seeded sampling with n=2, a cancelled stream) and error statuses.
Every check is an assert; the greedy token ids go to stdout as one line
"greedy_tokens: <ids>" for the C++ side to compare with its own client.

  /usr/bin/python3 -I interop_client.py --stubs=DIR --server=HOST:PORT --prompt=TEXT
"""

import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stubs", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max_tokens", type=int, default=12)
    args = ap.parse_args()
    sys.path.insert(0, args.stubs)

    import grpc  # Debian's python3-grpcio
    import health_pb2
    import health_pb2_grpc
    from weft.v1 import generate_pb2
    from weft.v1 import generate_pb2_grpc

    print("python %s, grpcio %s" % (sys.version.split()[0], grpc.__version__), file=sys.stderr)
    channel = grpc.insecure_channel(args.server)
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = generate_pb2_grpc.GenerationStub(channel)

    # ListModels: the one model, one replica attached.
    models = stub.ListModels(generate_pb2.ListModelsRequest(), timeout=30).models
    assert len(models) == 1, models
    model = models[0]
    assert model.name and model.vocab_size > 0 and model.context_length > 0, model
    assert model.num_replicas == 1, model
    assert model.chat_template == "jinja", model

    # Health.
    health = health_pb2_grpc.HealthStub(channel)
    resp = health.Check(health_pb2.HealthCheckRequest(), timeout=30)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING, resp

    # Greedy generation, by model name.
    req = generate_pb2.GenerateRequest(
        model=model.name,
        text=args.prompt,
        sampling=generate_pb2.SamplingParams(temperature=0.0),
        stopping=generate_pb2.StoppingParams(max_tokens=args.max_tokens, ignore_eos=True),
    )
    tokens, text, finish, usage, seed_seen, request_id = [], "", None, None, False, ""
    for r in stub.Generate(req, timeout=120):
        assert r.index == 0
        tokens.extend(r.token_ids)
        text += r.text
        if r.HasField("seed"):
            seed_seen = True
            request_id = r.request_id
        if r.finish_reason != generate_pb2.FINISH_REASON_UNSPECIFIED:
            finish = r.finish_reason
        if r.HasField("usage"):
            usage = r.usage
    assert len(tokens) == args.max_tokens, tokens
    assert finish == generate_pb2.FINISH_REASON_LENGTH, finish
    assert usage is not None and usage.completion_tokens == args.max_tokens, usage
    assert usage.prompt_tokens > 0, usage
    assert seed_seen and request_id, "the first response carries the seed and request id"
    assert text, "detokenized text streamed"

    # Chat prompt, seeded sampling with n = 2: both samples stream and finish.
    chat = generate_pb2.GenerateRequest(
        chat=generate_pb2.ChatPrompt(messages=[generate_pb2.ChatMessage(role="user", content="Hi!")]),
        sampling=generate_pb2.SamplingParams(temperature=0.8, top_p=0.95, seed=7),
        stopping=generate_pb2.StoppingParams(max_tokens=6, ignore_eos=True),
        n=2,
        logprobs=2,
    )
    per_sample = {0: [], 1: []}
    for r in stub.Generate(chat, timeout=120):
        per_sample[r.index].extend(r.token_ids)
        assert len(r.logprobs) == len(r.token_ids), r
    assert len(per_sample[0]) == 6 and len(per_sample[1]) == 6, per_sample
    again = {0: [], 1: []}
    for r in stub.Generate(chat, timeout=120):
        again[r.index].extend(r.token_ids)
    assert again == per_sample, "same seed, same tokens"

    # Errors are gRPC status codes.
    def code_of(request):
        try:
            for _ in stub.Generate(request, timeout=30):
                pass
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    bad = generate_pb2.GenerateRequest(text="x", sampling=generate_pb2.SamplingParams(top_p=2.0))
    assert code_of(bad) == grpc.StatusCode.INVALID_ARGUMENT
    unknown = generate_pb2.GenerateRequest(model="nope", text="x")
    assert code_of(unknown) == grpc.StatusCode.NOT_FOUND
    empty = generate_pb2.GenerateRequest(text="")
    assert code_of(empty) == grpc.StatusCode.INVALID_ARGUMENT

    # A client cancel ends the stream CANCELLED.
    call = stub.Generate(
        generate_pb2.GenerateRequest(
            text=args.prompt,
            sampling=generate_pb2.SamplingParams(temperature=0.0),
            stopping=generate_pb2.StoppingParams(max_tokens=500, ignore_eos=True),
        ),
        timeout=120,
    )
    next(call)
    call.cancel()
    try:
        for _ in call:
            pass
        raise AssertionError("a cancelled stream kept going")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.CANCELLED, e.code()

    print("greedy_tokens: " + " ".join(str(t) for t in tokens))
    print("interop: all checks passed", file=sys.stderr)


if __name__ == "__main__":
    main()
