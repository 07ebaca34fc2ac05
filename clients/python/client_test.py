"""Tests of clients/python/weft against an in-process Python gRPC server (a fake
Generation service and a health handler): what the client sends (request fields,
x-weft-model and authorization metadata, the health request's bytes) and what it makes
of the answers (Completion, errors as grpc.RpcError, health status names)."""

import sys
import threading
import unittest
from concurrent import futures

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

import grpc  # noqa: E402

from weft.client import Client, _health_request  # noqa: E402
from weft.v1 import generate_pb2, generate_pb2_grpc  # noqa: E402


class FakeGeneration(generate_pb2_grpc.GenerationServicer):
    def __init__(self):
        self.requests = []
        self.metadata = []

    def Generate(self, request, context):
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if request.text == "bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "sampling.top_p: must be in (0, 1]")
        n = request.n if request.HasField("n") else 1
        for i in range(n):
            yield generate_pb2.GenerateResponse(index=i, token_ids=[1, 2], text="he", seed=7,
                                                request_id="r1")
            yield generate_pb2.GenerateResponse(
                index=i, token_ids=[3], text="llo",
                finish_reason=generate_pb2.FINISH_REASON_LENGTH)
        yield generate_pb2.GenerateResponse(usage=generate_pb2.Usage(completion_tokens=3 * n))

    def ListModels(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        return generate_pb2.ListModelsResponse(models=[generate_pb2.ModelInfo(name="m1")])


def health_handler(seen):
    def check(request_bytes, context):
        seen.append(request_bytes)
        if request_bytes == _health_request("nope"):
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return b"\x08\x01" if request_bytes == b"" else b"\x08\x02"
    return grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(check),
    })


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fake = FakeGeneration()
        cls.health_seen = []
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        generate_pb2_grpc.add_GenerationServicer_to_server(cls.fake, cls.server)
        cls.server.add_generic_rpc_handlers((health_handler(cls.health_seen),))
        cls.port = cls.server.add_insecure_port("127.0.0.1:0")
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(None)

    def client(self, **kw):
        return Client("127.0.0.1:%d" % self.port, timeout=30, **kw)

    def test_request_fields_and_metadata(self):
        with self.client(model="m1", token="t0k") as c:
            out = c.complete("hi", max_tokens=5, temperature=0.5, top_k=3, min_p=0.1,
                             repetition_penalty=1.1, presence_penalty=0.5,
                             frequency_penalty=-0.5, seed=42, stop=["a,b", "\n"],
                             stop_token_ids=[9], ignore_eos=True, n=2, logprobs=1, priority=3)
        req = self.fake.requests[-1]
        self.assertEqual(req.model, "m1")
        self.assertEqual(req.text, "hi")
        self.assertEqual(req.stopping.max_tokens, 5)
        self.assertAlmostEqual(req.sampling.temperature, 0.5)
        self.assertEqual(req.sampling.top_k, 3)
        self.assertTrue(req.sampling.HasField("min_p"))
        self.assertFalse(req.sampling.HasField("top_p"))  # unset: the server's default
        self.assertEqual(req.sampling.seed, 42)
        self.assertEqual(list(req.stopping.stop), ["a,b", "\n"])
        self.assertEqual(list(req.stopping.stop_token_ids), [9])
        self.assertTrue(req.stopping.ignore_eos)
        self.assertEqual((req.n, req.logprobs, req.priority), (2, 1, 3))
        md = self.fake.metadata[-1]
        self.assertEqual(md["x-weft-model"], "m1")
        self.assertEqual(md["authorization"], "Bearer t0k")
        self.assertEqual(out.texts, ["hello", "hello"])
        self.assertEqual(out.token_ids[1], [1, 2, 3])
        self.assertEqual(out.finish_reason, "FINISH_REASON_LENGTH")
        self.assertEqual(out.usage.completion_tokens, 6)
        self.assertEqual((out.seed, out.request_id), (7, "r1"))

    def test_chat_and_token_prompts(self):
        with self.client() as c:
            c.complete(messages=[("system", "be brief"), {"role": "user", "content": "hi"}])
            req = self.fake.requests[-1]
            self.assertEqual([(m.role, m.content) for m in req.chat.messages],
                             [("system", "be brief"), ("user", "hi")])
            self.assertNotIn("x-weft-model", self.fake.metadata[-1])
            c.complete(token_ids=[5, 6])
            self.assertEqual(list(self.fake.requests[-1].token_ids.ids), [5, 6])
            with self.assertRaises(ValueError):
                c.request("x", token_ids=[1])

    def test_errors_are_rpc_errors_with_code_and_message(self):
        with self.client() as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.complete("bad")
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("top_p", e.exception.details())

    def test_list_models_and_health(self):
        with self.client(model="m1") as c:
            self.assertEqual([m.name for m in c.list_models()], ["m1"])
            self.assertEqual(c.health(), "SERVING")
            self.assertEqual(c.health("weft.v1.Generation"), "NOT_SERVING")
            self.assertEqual(self.health_seen[-1], b"\x0a\x12weft.v1.Generation")
            with self.assertRaises(grpc.RpcError) as e:
                c.health("nope")
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_cancel(self):
        with self.client() as c:
            call = c.generate("hi", n=1)
            next(call)
            call.cancel()
            with self.assertRaises(grpc.RpcError) as e:
                for _ in call:
                    pass
            self.assertEqual(e.exception.code(), grpc.StatusCode.CANCELLED)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
