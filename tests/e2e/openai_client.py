"""PyPI's official `openai` client against weft-scheduler's OpenAI-compatible HTTP API
(run by openai_http_test.cc with the venv of openai_venv.sh).

Every check is an assert; the C++ side compares what this prints on stdout with its own
gRPC calls and the scheduler's metrics. Phases:

  serve       models; completions and chat, streamed and not (a streamed greedy answer
              equals the non-streamed one); stream_options.include_usage; n=2 with a seed
              (choices interleaved by index, same seed same texts); logprobs in both
              shapes; 400 and 404 errors. Prints "greedy_text: <json string>".
  disconnect  leaves a streamed completion after 3 chunks and lets a non-streamed one
              time out: the server must cancel both (the C++ side checks the metrics).
  no_replica  the scheduler has no worker: completions and chat (streamed and not) are
              503, and /health is 503.
  auth        an HTTPS port with bearer tokens (--ca, --other_ca, --token): no token and a
              wrong one are openai.AuthenticationError (401, WWW-Authenticate: Bearer),
              streamed or not; the right one works; /health needs none; plaintext and a
              client trusting another CA cannot connect; the x-weft-model header (agreeing,
              disagreeing with the body, naming another model). Prints "calls: <json>".
  proxy       through HAProxy (--base_url=http://PROXY, no /v1; --models=alpha,beta
              served, --misrouted=a backend whose scheduler serves another model,
              --unknown=a model no backend has): by header (default_headers and
              extra_headers), by path prefix (base_url http://PROXY/<model>/v1) and by the
              JSON body's "model" alone (no header: short and 100 KB prompts, chat with
              "messages" before "model"), the model list (GET /v1/models: alpha and beta,
              not the misrouted one), the proxy's own errors (413 for a body larger than
              its buffer), a stream left after 2 chunks. Prints "calls: <json>".
  proxy_down  through HAProxy after the second model's scheduler stopped: its calls are
              503 (InternalServerError) by path or body, it is no longer listed, the first
              model's are answered (2 by header, 1 by body).

  python openai_client.py --base_url=http://127.0.0.1:PORT/v1 --phase=serve \
      --prompt=TEXT --max_tokens=N
"""

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request

import openai


def check_serve(client, prompt, n_tokens):
    models = client.models.list().data
    assert len(models) == 1, models
    model = models[0].id
    assert models[0].object == "model", models[0]
    greedy = dict(model=model, prompt=prompt, max_tokens=n_tokens, temperature=0,
                  extra_body={"ignore_eos": True})

    # Completions, not streamed.
    r = client.completions.create(**greedy)
    assert r.object == "text_completion" and r.id.startswith("cmpl-"), r
    assert r.model == model, r.model
    assert len(r.choices) == 1 and r.choices[0].index == 0, r.choices
    text = r.choices[0].text
    assert text, r
    assert r.choices[0].finish_reason == "length", r.choices[0]
    assert r.usage.completion_tokens == n_tokens, r.usage
    assert r.usage.prompt_tokens > 0, r.usage
    assert r.usage.total_tokens == r.usage.prompt_tokens + n_tokens, r.usage
    print("greedy_text: " + json.dumps(text))

    # Completions, streamed with usage: the same text, one finish, the usage chunk last.
    chunks = list(client.completions.create(**greedy, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage is not None, chunks[-1]
    assert chunks[-1].usage.completion_tokens == n_tokens, chunks[-1].usage
    assert all(c.usage is None for c in chunks[:-1]), chunks
    assert "".join(c.choices[0].text for c in chunks[:-1]) == text
    finishes = [c.choices[0].finish_reason for c in chunks[:-1] if c.choices[0].finish_reason]
    assert finishes == ["length"], finishes
    # Without include_usage there is no usage chunk.
    plain = list(client.completions.create(**greedy, stream=True))
    assert all(c.choices for c in plain), plain[-1]
    assert "".join(c.choices[0].text for c in plain) == text

    # Chat, not streamed, then streamed: the same greedy answer.
    messages = [{"role": "system", "content": "You are a concise assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
    chat = dict(model=model, messages=messages, max_completion_tokens=n_tokens, temperature=0)
    c = client.chat.completions.create(**chat)
    assert c.object == "chat.completion" and c.id.startswith("chatcmpl-"), c
    msg = c.choices[0].message
    assert msg.role == "assistant" and msg.content, msg
    assert c.choices[0].finish_reason in ("stop", "length"), c.choices[0]
    assert 0 < c.usage.completion_tokens <= n_tokens, c.usage
    chunks = list(client.chat.completions.create(**chat, stream=True))
    assert chunks[0].object == "chat.completion.chunk", chunks[0]
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == msg.content
    assert chunks[-1].choices[0].finish_reason == c.choices[0].finish_reason, chunks[-1]

    # n=2 with a seed: two choices; the same seed gives the same texts, streamed or not.
    sampled = dict(model=model, prompt=prompt, n=2, temperature=0.9, seed=1234, max_tokens=8,
                   extra_body={"ignore_eos": True})
    a = client.completions.create(**sampled)
    assert sorted(ch.index for ch in a.choices) == [0, 1], a.choices
    assert a.usage.completion_tokens == 16, a.usage
    b = client.completions.create(**sampled)
    assert [ch.text for ch in sorted(a.choices, key=lambda x: x.index)] == \
        [ch.text for ch in sorted(b.choices, key=lambda x: x.index)]
    order, texts, ends = [], {0: "", 1: ""}, {0: 0, 1: 0}
    for ch in client.completions.create(**sampled, stream=True):
        for choice in ch.choices:
            order.append(choice.index)
            texts[choice.index] += choice.text
            ends[choice.index] += choice.finish_reason is not None
    assert ends == {0: 1, 1: 1}, ends
    assert order.index(1) < len(order) - 1 - order[::-1].index(0), order  # interleaved
    assert [texts[0], texts[1]] == [ch.text for ch in sorted(a.choices, key=lambda x: x.index)]

    # Logprobs, completions shape: per token; greedy picks the most likely token.
    r = client.completions.create(**greedy, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == \
        len(lp.text_offset) == n_tokens, lp
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 4, top
        assert chosen >= max(top.values()) - 1e-4, (chosen, top)
    assert lp.text_offset == sorted(lp.text_offset), lp.text_offset
    # Chat shape: content entries with bytes and top_logprobs.
    c = client.chat.completions.create(**chat, logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == c.usage.completion_tokens, (len(content), c.usage)
    for entry in content:
        assert len(entry.top_logprobs) == 2 and entry.bytes is not None, entry
    c = client.chat.completions.create(**chat)
    assert c.choices[0].logprobs is None, c.choices[0]

    # Errors: OpenAI's shape with the right status.
    try:
        client.completions.create(model=model, prompt=prompt, temperature=-1)
        raise AssertionError("temperature=-1 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "temperature", e.body
        assert e.body["type"] == "invalid_request_error", e.body
    try:
        client.chat.completions.create(model=model, messages=messages, top_logprobs=2)
        raise AssertionError("top_logprobs without logprobs was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "top_logprobs", e.body
    try:
        client.completions.create(model="no-such-model", prompt=prompt)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body
    try:
        client.completions.create(model=model, prompt=prompt, stream=True, n=0)
        raise AssertionError("n=0 was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "n", e.body


def check_disconnect(client, prompt):
    model = client.models.list().data[0].id
    long = dict(model=model, prompt=prompt, max_tokens=3000, temperature=0,
                extra_body={"ignore_eos": True})
    stream = client.completions.create(**long, stream=True)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()  # leaves in the middle: the connection is closed
    try:
        client.with_options(timeout=2.0).completions.create(**long)
        raise AssertionError("3000 tokens came back within 2 s")
    except openai.APITimeoutError:
        pass  # the client gave up and closed its connection


def check_no_replica(client, base_url):
    for kwargs in ({"stream": False}, {"stream": True}):
        try:
            client.completions.create(model="", prompt="x", max_tokens=4, **kwargs)
            raise AssertionError("served without a replica")
        except openai.InternalServerError as e:
            assert e.status_code == 503, e
            assert e.body["type"] == "server_error" and e.body["code"] == "unavailable", e.body
        try:
            client.chat.completions.create(model="", messages=[{"role": "user", "content": "x"}],
                                           max_tokens=4, **kwargs)
            raise AssertionError("served without a replica")
        except openai.InternalServerError as e:
            assert e.status_code == 503, e
    try:
        urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/health", timeout=30)
        raise AssertionError("/health said OK without a replica")
    except urllib.error.HTTPError as e:
        assert e.code == 503, e


def expect(exception, call, **fields):
    """Runs call(), which must raise `exception` whose error body has `fields`."""
    try:
        call()
    except exception as e:
        for k, v in fields.items():
            assert e.body[k] == v, (k, v, e.body)
        return e
    raise AssertionError("no %s" % exception.__name__)


def new_client(base_url, api_key="unused", **kwargs):
    # No retries: every status must be the server's (or the proxy's) first answer.
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120,
                         **kwargs)


def check_auth(base_url, ca, other_ca, token):
    calls = {"ok": 0, "refused": 0, "prompt_tokens": 0}
    tls = ssl.create_default_context(cafile=ca)

    def answered(r):
        calls["ok"] += 1
        calls["prompt_tokens"] += r.usage.prompt_tokens
        return r

    def client(api_key="unused", verify=tls, url=base_url, **kw):
        return new_client(url, api_key, http_client=openai.DefaultHttpxClient(verify=verify),
                          **kw)

    good = client(api_key=token)
    model = good.models.list().data[0].id
    short = dict(model=model, prompt="Hello", max_tokens=2, temperature=0,
                 extra_body={"ignore_eos": True})
    chat = dict(model=model, messages=[{"role": "user", "content": "Hi"}],
                max_completion_tokens=2)
    assert answered(good.completions.create(**short)).usage.completion_tokens == 2

    # No token (the client sends no Authorization header at all), then a wrong one.
    omit = {"Authorization": openai.Omit()}
    wrong = client(api_key="wrong-" + token)
    for c, extra, challenge in ((good, omit, "Bearer"),
                                (wrong, {}, 'Bearer error="invalid_token"')):
        for call, generation in (
                (lambda: c.models.list(extra_headers=extra), False),
                (lambda: c.completions.create(**short, extra_headers=extra), True),
                (lambda: c.chat.completions.create(**chat, stream=True, extra_headers=extra),
                 True)):
            e = expect(openai.AuthenticationError, call, code="invalid_api_key",
                       type="invalid_request_error")
            assert e.status_code == 401, e
            assert e.response.headers["www-authenticate"] == challenge, e.response.headers
            assert token not in json.dumps(e.body), e.body
            calls["refused"] += generation

    # Probes carry no token: /health answers over TLS without one.
    health = base_url.rsplit("/v1", 1)[0] + "/health"
    with urllib.request.urlopen(health, context=tls, timeout=30) as r:
        assert r.status == 200, r.status

    # Plaintext to the TLS port, and a client that trusts another CA: no connection.
    expect(openai.APIConnectionError,
           lambda: client(api_key=token, url=base_url.replace("https://", "http://"))
           .models.list())
    expect(openai.APIConnectionError,
           lambda: client(api_key=token, verify=ssl.create_default_context(cafile=other_ca))
           .models.list())

    # The x-weft-model header: alone or agreeing, it selects the model; disagreeing with
    # the body it is a 400 on "model"; naming a model not served here, a 404.
    by_header = client(api_key=token, default_headers={"x-weft-model": model})
    assert [m.id for m in by_header.models.list().data] == [model]
    assert answered(by_header.completions.create(**short)).model == model
    assert answered(good.completions.create(**dict(short, model=""),
                                            extra_headers={"x-weft-model": model})).model == model
    expect(openai.BadRequestError,
           lambda: good.completions.create(**short, extra_headers={"x-weft-model": "other"}),
           param="model", code="invalid_argument")
    expect(openai.NotFoundError,
           lambda: good.completions.create(**dict(short, model=""),
                                           extra_headers={"x-weft-model": "other"}),
           code="model_not_found")
    expect(openai.NotFoundError,
           lambda: client(api_key=token, default_headers={"x-weft-model": "other"})
           .models.list(), code="model_not_found")
    print("calls: " + json.dumps(calls))


def long_prompt(size):
    """About `size` bytes of prompt that tokenizes into as few tokens as the default
    model's vocabulary allows: a newline and 80 spaces are one token, so 100 KB is 1,235
    tokens (measured with Weft's tokenizer), well inside its 8,192-token context: served,
    not refused for its length, and cheap to prefill."""
    return ("\n" + " " * 80) * (size // 81)


def recorded_bodies():
    """An httpx client for openai.OpenAI that keeps the request bodies it sent."""
    bodies = []
    client = openai.DefaultHttpxClient(
        event_hooks={"request": [lambda request: bodies.append(request.read())]})
    return client, bodies


def check_proxy_body(proxy, models, calls):
    """No header, no path prefix: the proxy routes by the JSON body's "model". openai
    3.57 writes "model" first; older SDKs (openai-python 1.x) and many clients write
    "messages" first, putting "model" after the whole prompt: both orders are sent."""
    http, bodies = recorded_bodies()
    c = new_client(proxy + "/v1", http_client=http)
    assert [x.id for x in c.models.list().data] == sorted(models)
    for m in models:
        # GET /v1/models/<id>: the model's own scheduler answers (with max_model_len).
        info = c.models.retrieve(m)
        assert info.id == m and info.max_model_len > 0, info
        r = c.chat.completions.create(model=m, messages=[{"role": "user", "content": "Hi"}],
                                      max_completion_tokens=2, temperature=0)
        assert r.model == m, r
        r = c.completions.create(model=m, prompt="The capital of France is", max_tokens=2,
                                 temperature=0)
        assert r.model == m, r
        calls[m] += 2

    # 100 KB prompts: a chat to the first model with "messages" first (its "model" ~100 KB
    # into the body, far past HAProxy's default 16 KiB buffer), sent through the SDK's
    # low-level post() to fix the key order; an SDK completion to the second.
    prompt = long_prompt(100_000)
    # ~1,200 prompt tokens to prefill each on a shared 2-core machine: a generous guard.
    c = c.with_options(timeout=600)
    r = c.post("/chat/completions", cast_to=openai.types.chat.ChatCompletion,
               body={"messages": [{"role": "user", "content": prompt}], "model": models[0],
                     "max_completion_tokens": 2, "temperature": 0})
    assert r.model == models[0] and r.usage.prompt_tokens > 1000, r.usage
    assert bodies[-1].index(b'"model"') > 100_000, bodies[-1][:80]
    r = c.completions.create(model=models[1], prompt=prompt, max_tokens=2, temperature=0)
    assert r.model == models[1] and r.usage.prompt_tokens > 1000, r.usage
    assert len(bodies[-1]) > 100_000, len(bodies[-1])
    calls[models[0]] += 1
    calls[models[1]] += 1
    print("long_prompt_tokens: %d" % r.usage.prompt_tokens)

    # What the body cannot route: no model (or ""), a model no backend has, a name that is
    # not one, a body larger than the proxy's buffer (1 MiB: its "model" may be unread).
    expect(openai.BadRequestError,
           lambda: c.completions.create(model="", prompt="x", max_tokens=1), code="model_required")
    expect(openai.NotFoundError,
           lambda: c.completions.create(model="zeta", prompt="x", max_tokens=1),
           code="model_not_found")
    expect(openai.NotFoundError,
           lambda: c.chat.completions.create(model="no such model",
                                             messages=[{"role": "user", "content": "x"}]),
           code="model_not_found")
    e = expect(openai.APIStatusError,
               lambda: c.post("/chat/completions", cast_to=openai.types.chat.ChatCompletion,
                              body={"messages": [{"role": "user",
                                                  "content": long_prompt(1_100_000)}],
                                    "model": models[0], "max_completion_tokens": 1}),
               code="body_too_large_to_route", param="model")
    assert e.status_code == 413, e


def check_proxy(proxy, models, misrouted, unknown):
    calls = {m: 0 for m in models}
    greedy = dict(prompt="The capital of France is", max_tokens=3, temperature=0,
                  extra_body={"ignore_eos": True})
    chat_messages = [{"role": "user", "content": "Hi"}]

    # By header, set once for the client (default_headers): one client per model.
    for m in models:
        c = new_client(proxy + "/v1", default_headers={"x-weft-model": m})
        assert [x.id for x in c.models.list().data] == [m]
        r = c.completions.create(model=m, **greedy)
        assert r.model == m and r.usage.completion_tokens == 3, r
        chunks = list(c.chat.completions.create(model=m, messages=chat_messages,
                                                max_completion_tokens=3, stream=True,
                                                stream_options={"include_usage": True}))
        assert chunks[-1].usage.completion_tokens <= 3 and chunks[-1].model == m, chunks[-1]
        calls[m] += 2

    # By header per request (extra_headers): one client for every model.
    shared = new_client(proxy + "/v1")
    for m in models:
        r = shared.completions.create(model=m, **greedy, extra_headers={"x-weft-model": m})
        assert r.model == m, r
        calls[m] += 1

    # By path: the model's prefix in base_url; the body's model may be left empty.
    for m in models:
        c = new_client("%s/%s/v1" % (proxy, m))
        assert [x.id for x in c.models.list().data] == [m]
        text = "".join(ch.choices[0].text
                       for ch in c.completions.create(model=m, **greedy, stream=True))
        assert text, m
        assert c.completions.create(model="", **greedy).model == m
        calls[m] += 2
        with urllib.request.urlopen("%s/%s/health" % (proxy, m), timeout=30) as r:
            assert r.status == 200 and json.load(r)["status"] == "serving"

    # By the body alone (what every OpenAI SDK sends), and the model list.
    check_proxy_body(proxy, models, calls)

    # The proxy's own answers, in OpenAI's shape.
    expect(openai.NotFoundError,
           lambda: new_client("%s/%s/v1" % (proxy, unknown)).models.list(),
           code="model_not_found")
    expect(openai.BadRequestError,
           lambda: new_client("%s/%s/v1" % (proxy, models[0]),
                              default_headers={"x-weft-model": models[1]}).models.list(),
           code="invalid_argument")
    # A backend whose scheduler serves another model fails the proxy's health check (and
    # is left out of the model list above).
    e = expect(openai.InternalServerError,
               lambda: new_client("%s/%s/v1" % (proxy, misrouted)).models.list(),
               code="unavailable", type="server_error")
    assert e.status_code == 503, e
    # Routed by the header, checked by the scheduler against the body (it counts it).
    expect(openai.BadRequestError,
           lambda: shared.completions.create(model=models[0], **greedy,
                                             extra_headers={"x-weft-model": models[1]}),
           param="model")

    # A client that leaves a stream through the proxy: the scheduler cancels it.
    stream = new_client("%s/%s/v1" % (proxy, models[0])).completions.create(
        model=models[0], prompt="Once upon a time", max_tokens=3000, temperature=0,
        stream=True, extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 1:
            break
    stream.close()
    print("calls: " + json.dumps(calls))


def check_proxy_down(proxy, models):
    up, down = models
    e = expect(openai.InternalServerError,
               lambda: new_client("%s/%s/v1" % (proxy, down)).completions.create(
                   model=down, prompt="x", max_tokens=2),
               code="unavailable")
    assert e.status_code == 503, e
    c = new_client(proxy + "/v1", default_headers={"x-weft-model": up})
    for _ in range(2):
        assert c.completions.create(model=up, prompt="x", max_tokens=2).model == up
    # By the body: the stopped model is 503 and no longer listed; the other is answered.
    body_only = new_client(proxy + "/v1")
    assert [x.id for x in body_only.models.list().data] == [up]
    expect(openai.InternalServerError,
           lambda: body_only.completions.create(model=down, prompt="x", max_tokens=2),
           code="unavailable")
    assert body_only.completions.create(model=up, prompt="x", max_tokens=2).model == up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base_url", required=True)
    ap.add_argument("--phase", required=True,
                    choices=["serve", "disconnect", "no_replica", "auth", "proxy", "proxy_down"])
    ap.add_argument("--prompt", default="The quick brown fox")
    ap.add_argument("--max_tokens", type=int, default=12)
    ap.add_argument("--ca", help="auth: the CA that signed the server's certificate")
    ap.add_argument("--other_ca", help="auth: a CA that did not")
    ap.add_argument("--token", help="auth: a bearer token the server accepts")
    ap.add_argument("--models", help="proxy: two models the proxy routes, comma-separated")
    ap.add_argument("--misrouted", help="proxy: a model whose backend serves another one")
    ap.add_argument("--unknown", help="proxy: a model the proxy has no backend for")
    args = ap.parse_args()
    print("python %s, openai %s" % (sys.version.split()[0], openai.__version__), file=sys.stderr)
    client = new_client(args.base_url)
    if args.phase == "serve":
        check_serve(client, args.prompt, args.max_tokens)
    elif args.phase == "disconnect":
        check_disconnect(client, args.prompt)
    elif args.phase == "no_replica":
        check_no_replica(client, args.base_url)
    elif args.phase == "auth":
        check_auth(args.base_url, args.ca, args.other_ca, args.token)
    elif args.phase == "proxy":
        check_proxy(args.base_url, args.models.split(","), args.misrouted, args.unknown)
    else:
        check_proxy_down(args.base_url, args.models.split(","))
    print("openai_client: %s: all checks passed" % args.phase, file=sys.stderr)


if __name__ == "__main__":
    main()
