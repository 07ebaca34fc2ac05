"""A small client for Weft's gRPC API (weft.v1.Generation), to vendor into a service.

Copy the `weft/` directory (this file, `__init__.py` and `v1/` with the stubs generated
from proto/weft/v1/generate.proto) next to your code; it needs only `grpcio` and
`protobuf` (tested with Debian 12's python3-grpcio 1.51 and python3-protobuf 3.21; the
stubs need protobuf >= 3.20 — regenerate them with clients/python/regenerate.sh for
other versions).

    from weft.client import Client

    with Client("weft.example:50051", model="smollm2", token="...",
                root_certificates=open("ca.crt", "rb").read()) as client:
        for chunk in client.generate("The capital of France is", max_tokens=16):
            print(chunk.text, end="", flush=True)

Every call sends the model as `x-weft-model` metadata (proxies route by it) and the token
as `authorization: Bearer <token>`. Errors are `grpc.RpcError`s: `e.code()` is the status
(INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNAVAILABLE, UNAUTHENTICATED ...) and
`e.details()` the server's message; see proto/weft/v1/generate.proto.

Calls that fail UNAVAILABLE before anything was streamed (a scheduler restarting or
draining, no replica attached yet) are made again with backoff, within the call's
timeout: `Retry` (README.md, "Clients retry"); `retry=NO_RETRY` turns it off.
"""

import random
import time

import grpc

from weft.v1 import generate_pb2
from weft.v1 import generate_pb2_grpc

__all__ = ["Client", "Completion", "NO_RETRY", "Retry", "generate_pb2"]

MODEL_METADATA_KEY = "x-weft-model"

_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _health_request(service):
    # grpc.health.v1.HealthCheckRequest{service}: field 1, length-delimited. Encoded by
    # hand so that no second copy of grpc/health/v1/health.proto is registered.
    data = service.encode("utf-8")
    return b"\x0a" + _varint(len(data)) + data if data else b""


def _health_status(data):
    # grpc.health.v1.HealthCheckResponse{status}: field 1, varint (absent = 0).
    if len(data) >= 2 and data[0] == 0x08:
        return _HEALTH_STATUS.get(data[1], str(data[1]))
    return "UNKNOWN"


class Retry:
    """When a call is made again (README.md, "Clients retry"; the CLI's --retry_* flags
    follow the same rule): its status is one of `codes` (UNAVAILABLE; CANCELLED when this
    client did not cancel it: gRPC 1.51's server cancels a call that races a draining
    scheduler's GOAWAY) and it received no response message — for Generate, no token was
    streamed — so nothing was lost and nothing is repeated. Up to `max_attempts` calls in all; before call k+1 it waits
    min(`max_backoff_s`, `initial_backoff_s` x `multiplier`^(k-1)), shortened at random by
    up to `jitter` of it (clients restarting together do not retry in step), and never
    past the call's deadline (its timeout covers every attempt and wait). A call that has
    streamed a token is never repeated: its error reaches the caller.

    The defaults wait 0.25, 0.5, 1, 2, 4, 5, 5 ... s: nine retries span about 30 s, a
    scheduler pod's restart for a small model. `sleep` and `random` are for tests."""

    def __init__(self, max_attempts=10, initial_backoff_s=0.25, max_backoff_s=5.0,
                 multiplier=2.0, jitter=0.2,
                 codes=(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED),
                 sleep=time.sleep, random=random.random):
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1 (1: no retry)")
        if not 0 < initial_backoff_s <= max_backoff_s:
            raise ValueError("need 0 < initial_backoff_s <= max_backoff_s")
        if multiplier < 1 or not 0 <= jitter < 1:
            raise ValueError("need multiplier >= 1 and 0 <= jitter < 1")
        self.max_attempts = max_attempts
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.multiplier = multiplier
        self.jitter = jitter
        self.codes = frozenset(codes)
        self.sleep = sleep
        self.random = random

    def backoff_s(self, retry):
        """The wait before retry number `retry` (0: before the second call)."""
        b = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** retry)
        return b * (1.0 - self.jitter * self.random())

    def wait(self, error, attempts, deadline):
        """After `attempts` calls, the last failing with `error` (nothing received): waits
        and returns True when another call is due, else False (the caller raises)."""
        if error.code() not in self.codes or attempts >= self.max_attempts:
            return False
        delay = self.backoff_s(attempts - 1)
        if time.monotonic() + delay >= deadline:
            return False
        self.sleep(delay)
        return True


NO_RETRY = Retry(max_attempts=1)


class _RetryingCall:
    """What Client.generate returns: an iterator of GenerateResponse messages with
    .cancel(), which makes the call again under `retry` while no message has arrived.
    Other attributes (code(), details(), trailing_metadata() ...) are the current call's.
    `attempts` counts the calls made."""

    def __init__(self, start, retry, deadline):
        self._start = start  # start(timeout_s) -> a new grpc streaming call
        self._retry = retry
        self._deadline = deadline
        self._received = False
        self._cancelled = False
        self.attempts = 0
        self._call = self._new_call()

    def _new_call(self):
        self.attempts += 1
        return self._start(max(0.0, self._deadline - time.monotonic()))

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            try:
                message = next(self._call)
            except grpc.RpcError as e:
                if self._received or self._cancelled or not self._retry.wait(
                        e, self.attempts, self._deadline) or self._cancelled:
                    raise
                self._call = self._new_call()
                continue
            self._received = True
            return message

    def cancel(self):
        self._cancelled = True
        return self._call.cancel()

    def __getattr__(self, name):
        return getattr(self._call, name)


class Completion:
    """A whole generation: sample texts and token ids, finish reasons, usage, seed."""

    def __init__(self, n):
        self.texts = [""] * n
        self.token_ids = [[] for _ in range(n)]
        self.finish_reasons = [None] * n
        self.usage = None
        self.seed = None
        self.request_id = ""

    @property
    def text(self):
        return self.texts[0]

    @property
    def finish_reason(self):
        return self.finish_reasons[0]


class Client:
    """A connection to one weft-scheduler (or a proxy in front of several).

    target: "host:port". model: the model to ask for (None: the server's only model).
    token: bearer token, if the server requires one. TLS is used when `tls` is true or
    any of root_certificates / private_key / certificate_chain is given (PEM bytes;
    no root_certificates: the system's CA roots). server_name overrides the name the
    server's certificate must carry. timeout: default deadline in seconds per call (its
    retries included). retry: when Generate and ListModels are made again (Retry; the
    default Retry(), NO_RETRY for none).
    """

    def __init__(self, target, model=None, token=None, tls=None, root_certificates=None,
                 private_key=None, certificate_chain=None, server_name=None, timeout=600.0,
                 options=None, retry=None):
        self.model = model or ""
        self.timeout = timeout
        self.retry = retry if retry is not None else Retry()
        self._metadata = []
        if self.model:
            self._metadata.append((MODEL_METADATA_KEY, self.model))
        if token:
            self._metadata.append(("authorization", "Bearer " + token))
        opts = list(options or [])
        opts.append(("grpc.max_receive_message_length", 64 << 20))
        if tls is None:
            tls = bool(root_certificates or private_key or certificate_chain)
        if tls:
            if server_name:
                opts.append(("grpc.ssl_target_name_override", server_name))
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates,
                                                 private_key=private_key,
                                                 certificate_chain=certificate_chain)
            self._channel = grpc.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        self._stub = generate_pb2_grpc.GenerationStub(self._channel)
        self._health = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_health_request,
            response_deserializer=_health_status)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, prompt=None, messages=None, token_ids=None, max_tokens=None,
                temperature=None, top_p=None, top_k=None, min_p=None,
                repetition_penalty=None, presence_penalty=None, frequency_penalty=None,
                seed=None, stop=None, stop_token_ids=None, ignore_eos=False, n=None,
                logprobs=None, priority=0, client_request_id=""):
        """Builds a GenerateRequest. Exactly one of prompt (text), messages (a list of
        (role, content) pairs or dicts with "role"/"content") or token_ids. Arguments
        left None take the server's defaults (proto/weft/v1/generate.proto)."""
        req = generate_pb2.GenerateRequest(model=self.model, priority=priority,
                                           client_request_id=client_request_id)
        given = [x is not None for x in (prompt, messages, token_ids)]
        if sum(given) != 1:
            raise ValueError("give exactly one of prompt, messages or token_ids")
        if prompt is not None:
            req.text = prompt
        elif token_ids is not None:
            req.token_ids.ids.extend(token_ids)
        else:
            for m in messages:
                role, content = (m["role"], m["content"]) if isinstance(m, dict) else m
                req.chat.messages.add(role=role, content=content)
        sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                        repetition_penalty=repetition_penalty,
                        presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, seed=seed)
        for name, value in sampling.items():
            if value is not None:
                setattr(req.sampling, name, value)
        if max_tokens is not None:
            req.stopping.max_tokens = max_tokens
        if isinstance(stop, str):
            stop = [stop]
        req.stopping.stop.extend(stop or [])
        req.stopping.stop_token_ids.extend(stop_token_ids or [])
        req.stopping.ignore_eos = ignore_eos
        if n is not None:
            req.n = n
        if logprobs is not None:
            req.logprobs = logprobs
        return req

    def generate(self, prompt=None, timeout=None, **kwargs):
        """Streams GenerateResponse messages (text deltas, token ids, finish reason;
        usage on the last one). Keyword arguments as for request(). The returned call
        is an iterator with .cancel() (the server frees the request's KV blocks); it is
        made again under self.retry while no message has arrived."""
        req = self.request(prompt, **kwargs)
        deadline = time.monotonic() + (timeout or self.timeout)
        return _RetryingCall(
            lambda left: self._stub.Generate(req, timeout=left, metadata=self._metadata),
            self.retry, deadline)

    def complete(self, prompt=None, timeout=None, **kwargs):
        """Runs a generation to its end and returns a Completion."""
        out = Completion(kwargs.get("n") or 1)
        for r in self.generate(prompt, timeout=timeout, **kwargs):
            out.texts[r.index] += r.text
            out.token_ids[r.index].extend(r.token_ids)
            if r.finish_reason:
                out.finish_reasons[r.index] = generate_pb2.FinishReason.Name(r.finish_reason)
            if r.HasField("seed"):
                out.seed = r.seed
                out.request_id = r.request_id
            if r.HasField("usage"):
                out.usage = r.usage
        return out

    def list_models(self, timeout=10.0):
        """The served models (weft.v1.ModelInfo messages); made again under self.retry."""
        deadline = time.monotonic() + timeout
        attempts = 0
        while True:
            attempts += 1
            try:
                return list(self._stub.ListModels(
                    generate_pb2.ListModelsRequest(),
                    timeout=max(0.0, deadline - time.monotonic()),
                    metadata=self._metadata).models)
            except grpc.RpcError as e:
                if not self.retry.wait(e, attempts, deadline):
                    raise

    def health(self, service="", timeout=5.0):
        """grpc.health.v1 status of `service` ("", "weft.v1.Generation" or a model
        name): "SERVING", "NOT_SERVING" ... (an unknown service raises NOT_FOUND)."""
        return self._health(service, timeout=timeout, metadata=self._metadata)
