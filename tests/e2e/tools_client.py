"""Tool calls through PyPI's `openai` client (structured_output_test.cc runs it in the
venv of openai_venv.sh, which also holds PyPI's `jsonschema`).

Phases:
  tools  a `tools` request with tool_choice "required" (and one naming a function): every
         answer that finishes with "tool_calls" holds exactly one well-formed call (an id,
         type "function", a name among the tools, arguments that parse and validate with
         `jsonschema` against that tool's parameters), content null, usage counted; then
         the round trip: the call and a `tool` message with its result go back, and the
         model answers (finish "stop" or "length", counted); the same request streamed
         gives delta.tool_calls that reassemble to the same call (index, id and name
         first, then argument fragments); an unknown tool_choice name and parameters
         that do not compile are 400s naming the field; "auto" answers text or a valid
         call.
         Prints "tools: {...}" with the counts.

Exits non-zero (an AssertionError) on any check that fails.
"""
import argparse
import json
import sys

import jsonschema
import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        }}},
    {"type": "function", "function": {
        "name": "get_time",
        "description": "The local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 16}},
            "required": ["zone"],
            "additionalProperties": False,
        }}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def create(client, messages, seed, max_tokens, **kw):
    return client.chat.completions.create(
        model="", messages=messages, tools=TOOLS, max_tokens=max_tokens, temperature=0.8,
        seed=seed, **kw)


def check_call(call, names):
    """A well-formed call of one of `names`; returns (name, arguments as a dict)."""
    assert call.type == "function", call
    assert call.id, call
    assert call.function.name in names, call
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    return call.function.name, args


def required_calls(client, rounds, max_tokens, counts):
    """tool_choice "required": returns the first (seed, message) that made a call."""
    first = None
    for seed in range(rounds):
        r = create(client, QUESTION, seed, max_tokens, tool_choice="required",
                   parallel_tool_calls=False)
        c = r.choices[0]
        print("required seed %d: %s %r %r" % (seed, c.finish_reason, c.message.content,
                                              c.message.tool_calls), file=sys.stderr)
        assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0, r.usage
        if c.finish_reason == "length":
            counts["length"] += 1
            continue
        assert c.finish_reason == "tool_calls", c
        assert c.message.content is None, c.message
        assert len(c.message.tool_calls) == 1, c.message
        check_call(c.message.tool_calls[0], SCHEMAS)
        counts["calls"] += 1
        if first is None:
            first = (seed, c.message)
    return first


def streamed_call(client, seed, max_tokens):
    """The same request streamed: the call put together from its deltas."""
    stream = create(client, QUESTION, seed, max_tokens, tool_choice="required",
                    parallel_tool_calls=False, stream=True, stream_options={"include_usage": True})
    calls, finish, usage, order = {}, None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            for tc in ch.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    assert entry["id"] is None, "id sent twice"
                    entry["id"], entry["name"] = tc.id, tc.function.name
                    order.append("head")
                else:
                    assert entry["id"] is not None, "arguments before the call's id and name"
                if tc.function and tc.function.arguments:
                    entry["arguments"] += tc.function.arguments
                    order.append("args")
    assert usage is not None and usage.completion_tokens > 0, usage
    return calls, finish, order


def phase_tools(client, rounds, max_tokens):
    counts = {"calls": 0, "length": 0, "answers": {"stop": 0, "length": 0}, "auto": {}}
    first = required_calls(client, rounds, max_tokens, counts)
    assert first is not None, "no call finished within max_tokens: %r" % counts
    seed, message = first
    call = message.tool_calls[0]

    # A named function: only that one.
    r = create(client, QUESTION, 7, max_tokens,
               tool_choice={"type": "function", "function": {"name": "get_time"}})
    c = r.choices[0]
    if c.finish_reason == "tool_calls":
        assert all(check_call(t, ["get_time"]) for t in c.message.tool_calls)
        counts["named"] = "get_time"

    # The round trip: the call and its result back, then an answer.
    turns = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees celsius, sunny"},
    ]
    r = create(client, turns, seed, 24, tool_choice="none")
    c = r.choices[0]
    print("answer: %s %r" % (c.finish_reason, c.message.content), file=sys.stderr)
    assert c.finish_reason in ("stop", "length"), c
    assert isinstance(c.message.content, str) and not c.message.tool_calls, c.message
    assert r.usage.completion_tokens > 0, r.usage
    counts["answers"][c.finish_reason] += 1

    # Streamed: the deltas put together are the same call (same seed, same tokens).
    calls, finish, order = streamed_call(client, seed, max_tokens)
    assert finish == "tool_calls", finish
    assert list(calls) == [0], calls
    assert calls[0]["name"] == call.function.name, (calls, call)
    assert calls[0]["arguments"] == call.function.arguments, (calls, call)
    assert calls[0]["id"], calls
    assert order[0] == "head" and "args" in order, order

    # Refusals name the body's field: an unknown tool in tool_choice (the edge), and
    # parameters XGrammar cannot compile (the scheduler's compile, mapped to "tools").
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "strnig"}}}}}
    for kw, param in (
            ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "tool_choice.function.name"),
            ({"tools": [bad], "tool_choice": "required"}, "tools")):
        try:
            client.chat.completions.create(model="", messages=QUESTION, max_tokens=8, **kw)
            raise AssertionError("accepted: %r" % kw)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.body["param"] == param, e.body
            print("refused: %s" % e.body["message"], file=sys.stderr)

    # "auto": text, or a well-formed call (seed 101 calls, with the default model).
    r = create(client, QUESTION, 101, max_tokens, tool_choice="auto")
    c = r.choices[0]
    counts["auto"][c.finish_reason] = 1
    if c.finish_reason == "tool_calls":
        for t in c.message.tool_calls:
            check_call(t, SCHEMAS)
    else:
        assert c.finish_reason in ("stop", "length"), c
    print("tools: " + json.dumps(counts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base_url", required=True)
    ap.add_argument("--phase", required=True, choices=["tools"])
    ap.add_argument("--max_tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=600)
    phase_tools(client, args.rounds, args.max_tokens)
    print("tools_client: %s: all checks passed" % args.phase, file=sys.stderr)


if __name__ == "__main__":
    main()
