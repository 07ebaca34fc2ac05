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
"""

import grpc

from weft.v1 import generate_pb2
from weft.v1 import generate_pb2_grpc

__all__ = ["Client", "Completion", "generate_pb2"]

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
    server's certificate must carry. timeout: default deadline in seconds per call.
    """

    def __init__(self, target, model=None, token=None, tls=None, root_certificates=None,
                 private_key=None, certificate_chain=None, server_name=None, timeout=600.0,
                 options=None):
        self.model = model or ""
        self.timeout = timeout
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
        is an iterator with .cancel() (the server frees the request's KV blocks)."""
        req = self.request(prompt, **kwargs)
        return self._stub.Generate(req, timeout=timeout or self.timeout, metadata=self._metadata)

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
        """The served models (weft.v1.ModelInfo messages)."""
        return list(self._stub.ListModels(generate_pb2.ListModelsRequest(), timeout=timeout,
                                          metadata=self._metadata).models)

    def health(self, service="", timeout=5.0):
        """grpc.health.v1 status of `service` ("", "weft.v1.Generation" or a model
        name): "SERVING", "NOT_SERVING" ... (an unknown service raises NOT_FOUND)."""
        return self._health(service, timeout=timeout, metadata=self._metadata)
