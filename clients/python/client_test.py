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

from weft.client import NO_RETRY, Client, Retry, _health_request  # noqa: E402
from weft.v1 import generate_pb2, generate_pb2_grpc  # noqa: E402


class FakeGeneration(generate_pb2_grpc.GenerationServicer):
    def __init__(self):
        self.requests = []
        self.metadata = []
        self.calls = {}  # request text -> Generate calls seen
        self.list_failures = 0  # ListModels calls still to fail UNAVAILABLE

    def Generate(self, request, context):
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        self.calls[request.text] = self.calls.get(request.text, 0) + 1
        if request.text == "bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "sampling.top_p: must be in (0, 1]")
        # "unavailable-N": the first N calls with this text fail UNAVAILABLE before any
        # message (a scheduler restarting); "streamed-then-unavailable": one message, then
        # UNAVAILABLE (a scheduler gone mid-stream).
        if request.text.startswith("unavailable-"):
            if self.calls[request.text] <= int(request.text.split("-")[1]):
                context.abort(grpc.StatusCode.UNAVAILABLE, "no replica attached")
        # "cancelled-N": the first N calls are cancelled by the server before any message
        # (gRPC 1.51's server does so to a call that races a drain's GOAWAY).
        if request.text.startswith("cancelled-"):
            if self.calls[request.text] <= int(request.text.split("-")[1]):
                context.abort(grpc.StatusCode.CANCELLED, "server shutting down")
        if request.text == "streamed-then-unavailable":
            yield generate_pb2.GenerateResponse(index=0, token_ids=[1], text="he")
            context.abort(grpc.StatusCode.UNAVAILABLE, "the scheduler is draining")
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
        if self.list_failures > 0:
            self.list_failures -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
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



class RetryTest(unittest.TestCase):
    """Calls that failed UNAVAILABLE before streaming anything are made again, with
    backoff and a bound; a call that streamed a token never is."""

    @classmethod
    def setUpClass(cls):
        cls.fake = FakeGeneration()
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        generate_pb2_grpc.add_GenerationServicer_to_server(cls.fake, cls.server)
        cls.port = cls.server.add_insecure_port("127.0.0.1:0")
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(None)

    def client(self, retry, timeout=30):
        return Client("127.0.0.1:%d" % self.port, timeout=timeout, retry=retry)

    def policy(self, waits, **kw):
        # random() = 0.5: each wait is shortened by half the jitter, deterministically.
        return Retry(sleep=waits.append, random=lambda: 0.5, **kw)

    def test_unavailable_before_the_first_token_is_retried_with_backoff(self):
        waits = []
        with self.client(self.policy(waits, initial_backoff_s=0.25, max_backoff_s=1.0,
                                     jitter=0.2)) as c:
            call = c.generate("unavailable-4", max_tokens=3)
            self.assertEqual("".join(r.text for r in call), "hello")
            self.assertEqual(call.attempts, 5)
        self.assertEqual(self.fake.calls["unavailable-4"], 5)
        # 0.25, 0.5, 1, 1 (capped), each x 0.9.
        self.assertEqual([round(w, 6) for w in waits], [0.225, 0.45, 0.9, 0.9])

    def test_a_call_the_server_cancelled_before_the_first_token_is_retried(self):
        waits = []
        with self.client(self.policy(waits)) as c:
            call = c.generate("cancelled-2", max_tokens=3)
            self.assertEqual("".join(r.text for r in call), "hello")
            self.assertEqual(call.attempts, 3)
        self.assertEqual(self.fake.calls["cancelled-2"], 3)

    def test_retries_are_bounded(self):
        waits = []
        with self.client(self.policy(waits, max_attempts=3)) as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.complete("unavailable-100")
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.fake.calls["unavailable-100"], 3)
        self.assertEqual(len(waits), 2)
        # And by the call's deadline: a wait that would pass it is not taken.
        waits = []
        with self.client(self.policy(waits, initial_backoff_s=5, max_backoff_s=5),
                         timeout=2) as c:
            with self.assertRaises(grpc.RpcError):
                c.complete("unavailable-200")
        self.assertEqual((self.fake.calls["unavailable-200"], waits), (1, []))

    def test_never_after_a_token_was_streamed(self):
        waits = []
        with self.client(self.policy(waits)) as c:
            call = c.generate("streamed-then-unavailable")
            self.assertEqual(next(call).text, "he")
            with self.assertRaises(grpc.RpcError) as e:
                next(call)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual((self.fake.calls["streamed-then-unavailable"], waits), (1, []))

    def test_other_codes_and_no_retry_fail_at_once(self):
        waits = []
        with self.client(self.policy(waits)) as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.complete("bad")
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual((self.fake.calls["bad"], waits), (1, []))
        with self.client(NO_RETRY) as c:
            with self.assertRaises(grpc.RpcError):
                c.complete("unavailable-1")
        self.assertEqual(self.fake.calls["unavailable-1"], 1)

    def test_list_models_is_retried(self):
        waits = []
        self.fake.list_failures = 2
        with self.client(self.policy(waits)) as c:
            self.assertEqual([m.name for m in c.list_models()], ["m1"])
        self.assertEqual(len(waits), 2)

    def test_a_server_not_listening_yet(self):
        # Nothing listens: UNAVAILABLE at connect, retried, then given up (bounded).
        waits = []
        with Client("127.0.0.1:1", timeout=30, retry=self.policy(waits, max_attempts=3)) as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.complete("x")
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(waits), 2)

    def test_bad_policies_are_refused(self):
        for kw in ({"max_attempts": 0}, {"initial_backoff_s": 0},
                   {"initial_backoff_s": 2, "max_backoff_s": 1}, {"jitter": 1},
                   {"multiplier": 0.5}):
            with self.assertRaises(ValueError, msg=kw):
                Retry(**kw)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
