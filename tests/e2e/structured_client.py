"""Structured output through PyPI's `openai` client (structured_output_test.cc runs it
in the venv of openai_venv.sh, which also holds PyPI's `jsonschema`).

Phases:
  schemas  every bounded schema below through response_format json_schema (and one
           json_object), sequentially then at --concurrency streams at once mixed with
           unconstrained ones: every answer that finishes with "stop" parses and
           validates against its schema; answers cut by max_tokens ("length") are
           counted. Prints "structured: {...}" with the counts.

Exits non-zero (an AssertionError) on any check that fails.
"""
import argparse
import concurrent.futures
import importlib.metadata
import json
import sys

import jsonschema
import openai

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "email": {"type": "string", "maxLength": 30},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "address": {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["address"],
        "additionalProperties": False,
    },
    "tags": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        },
        "required": ["tags"],
        "additionalProperties": False,
    },
    "color": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}},
        "required": ["color"],
        "additionalProperties": False,
    },
    "scores": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": -5, "maximum": 5},
            "ok": {"type": "boolean"},
            "level": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        "required": ["count", "ok"],
        "additionalProperties": False,
    },
}

PROMPTS = {
    "person": "Describe a person as JSON with name and age.",
    "address": "Give an address as JSON.",
    "tags": "List up to three short tags as JSON.",
    "color": "Pick a color and answer in JSON.",
    "scores": "Answer in JSON with a count and ok flag.",
}


def ask(client, name, max_tokens, seed):
    """One constrained chat call; returns (finish_reason, content)."""
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": PROMPTS[name]}],
        max_tokens=max_tokens, temperature=0.8, seed=seed,
        response_format={"type": "json_schema",
                         "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}})
    return r.choices[0].finish_reason, r.choices[0].message.content


def ask_object(client, max_tokens, seed):
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": "Answer with a JSON object."}],
        max_tokens=max_tokens, temperature=0.8, seed=seed,
        response_format={"type": "json_object"})
    return r.choices[0].finish_reason, r.choices[0].message.content


def ask_free(client, max_tokens, seed):
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": "Tell me a short story."}],
        max_tokens=max_tokens, temperature=0.8, seed=seed)
    return r.choices[0].finish_reason, r.choices[0].message.content


def check(name, finish, content, counts):
    """Validates one constrained answer; counts stop/length per schema."""
    c = counts.setdefault(name, {"stop": 0, "length": 0})
    if finish == "length":
        c["length"] += 1
        return
    assert finish == "stop", (name, finish, content)
    value = json.loads(content)  # raises on anything that is not JSON
    if name == "json_object":
        assert isinstance(value, dict), content
    else:
        jsonschema.validate(value, SCHEMAS[name])
    c["stop"] += 1


def phase_schemas(client, max_tokens, concurrency, rounds):
    counts = {}
    # Sequentially: each schema a few seeds.
    for name in SCHEMAS:
        for seed in range(rounds):
            finish, content = ask(client, name, max_tokens, seed)
            print("%s seed %d: %s %r" % (name, seed, finish, content), file=sys.stderr)
            check(name, finish, content, counts)
    finish, content = ask_object(client, max_tokens, 1)
    check("json_object", finish, content, counts)
    # Under load: `concurrency` streams at once, every other one unconstrained.
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        names = list(SCHEMAS)
        for i in range(concurrency):
            if i % 2:
                jobs.append(("free", pool.submit(ask_free, client, 32, 1000 + i)))
            else:
                name = names[(i // 2) % len(names)]
                jobs.append((name, pool.submit(ask, client, name, max_tokens, 1000 + i)))
        free_done = 0
        for name, job in jobs:
            finish, content = job.result()
            if name == "free":
                assert finish in ("stop", "length"), finish
                free_done += 1
            else:
                check(name, finish, content, counts)
    stops = sum(c["stop"] for c in counts.values())
    lengths = sum(c["length"] for c in counts.values())
    assert free_done == concurrency // 2
    assert stops > 0, counts
    print("structured: " + json.dumps({"per_schema": counts, "stop": stops, "length": lengths,
                                      "free": free_done}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base_url", required=True)
    ap.add_argument("--phase", required=True, choices=["schemas"])
    ap.add_argument("--max_tokens", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=600)
    print("python %s, openai %s, jsonschema %s" % (
        sys.version.split()[0], openai.__version__, importlib.metadata.version("jsonschema")),
        file=sys.stderr)
    phase_schemas(client, args.max_tokens, args.concurrency, args.rounds)
    print("structured_client: %s: all checks passed" % args.phase, file=sys.stderr)


if __name__ == "__main__":
    main()
