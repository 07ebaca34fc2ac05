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

  python openai_client.py --base_url=http://127.0.0.1:PORT/v1 --phase=serve \
      --prompt=TEXT --max_tokens=N
"""

import argparse
import json
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base_url", required=True)
    ap.add_argument("--phase", required=True, choices=["serve", "disconnect", "no_replica"])
    ap.add_argument("--prompt", default="The quick brown fox")
    ap.add_argument("--max_tokens", type=int, default=12)
    args = ap.parse_args()
    print("python %s, openai %s" % (sys.version.split()[0], openai.__version__), file=sys.stderr)
    # No retries: every status must be the server's first answer.
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=120)
    if args.phase == "serve":
        check_serve(client, args.prompt, args.max_tokens)
    elif args.phase == "disconnect":
        check_disconnect(client, args.prompt)
    else:
        check_no_replica(client, args.base_url)
    print("openai_client: %s: all checks passed" % args.phase, file=sys.stderr)


if __name__ == "__main__":
    main()
