#!/usr/bin/env python3
"""Writes llama.cpp's tokenization of the tokenizer corpus, and Jinja renderings of the
GGUF's chat template, as reference data for Weft's tokenizer tests.

Outputs (see tests/testdata/README.md for the formats):
  tests/testdata/tokenizer_corpus.jsonl   ids llama.cpp gives every corpus string
  tests/testdata/chat_template_ref.jsonl  the GGUF chat template rendered with jinja2

Needs llama-cpp-python (any build whose shared libraries are given by
LLAMA_CPP_LIB_PATH; the data in the repository came from llama.cpp build 0c1e570 as
vendored by llama-cpp-python 0.3.36) and jinja2. Example:

  LLAMA_CPP_LIB_PATH=/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \\
  /work/ref/venv/bin/python tools/refdata/make_tokenizer_ref.py \\
      --model /work/main/models/SmolLM2-135M-Instruct.Q4_1.gguf

--model defaults to $WEFT_MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf; --out_dir to
tests/testdata next to this script's repository root.
"""

import argparse
import ctypes
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_corpus_strings  # noqa: E402

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fnv1a64(chunks):
    """FNV-1a 64 over each chunk as (u32 little-endian length, bytes)."""
    h = 0xCBF29CE484222325
    for c in chunks:
        for b in len(c).to_bytes(4, "little") + c:
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


class Vocab:
    """Thin wrapper over llama.cpp's C API (through llama-cpp-python's ctypes)."""

    def __init__(self, model_path):
        import llama_cpp  # imported late: needs LLAMA_CPP_LIB_PATH
        self.L = llama_cpp
        self.llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.n = llama_cpp.llama_vocab_n_tokens(self.vocab)

    def tokenize(self, data, parse_special):
        cap = len(data) + 16
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), buf, cap, False, parse_special)
        if n < 0:
            raise RuntimeError("token buffer too small")
        return list(buf[:n])

    def detokenize(self, ids, unparse_special):
        arr = (self.L.llama_token * max(1, len(ids)))(*ids)
        cap = 64 * len(ids) + 64
        out = ctypes.create_string_buffer(cap)
        n = self.L.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, unparse_special)
        if n < 0:
            raise RuntimeError("text buffer too small")
        return out.raw[:n]

    def piece(self, token, special):
        buf = ctypes.create_string_buffer(512)
        n = self.L.llama_token_to_piece(self.vocab, token, buf, 512, 0, special)
        if n < 0:
            raise RuntimeError("piece buffer too small")
        return buf.raw[:n]

    def meta(self):
        L, v = self.L, self.vocab
        return {
            "vocab_size": self.n,
            "bos": L.llama_vocab_bos(v),
            "eos": L.llama_vocab_eos(v),
            "eot": L.llama_vocab_eot(v),
            "add_bos": bool(L.llama_vocab_get_add_bos(v)),
            "add_eos": bool(L.llama_vocab_get_add_eos(v)),
            "eog": [i for i in range(self.n) if L.llama_vocab_is_eog(v, i)],
            "control": [i for i in range(self.n) if L.llama_vocab_is_control(v, i)],
            "pieces_fnv1a64": fnv1a64(self.piece(i, False) for i in range(self.n)),
            "pieces_special_fnv1a64": fnv1a64(self.piece(i, True) for i in range(self.n)),
        }


def corpus_lines(vocab, corpus):
    lines = []
    for i, (cat, value) in enumerate(corpus):
        data = value if isinstance(value, bytes) else value.encode("utf-8")
        entry = {"i": i, "cat": cat}
        if isinstance(value, bytes):
            entry["text_hex"] = data.hex()
        else:
            entry["text"] = value
        ids = vocab.tokenize(data, True)
        entry["ids"] = ids
        plain = vocab.tokenize(data, False)
        if plain != ids:
            entry["ids_plain"] = plain
        decoded = vocab.detokenize(ids, False)
        if decoded != data:
            entry["decoded_hex"] = decoded.hex()
        decoded_special = vocab.detokenize(ids, True)
        if decoded_special != data:
            entry["decoded_special_hex"] = decoded_special.hex()
        lines.append(entry)
    return lines


CHAT_CASES = [
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "user", "content": "Hello!"}], False),
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2?"}], True),
    ([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello! How can I help?"},
      {"role": "user", "content": "Tell me a joke.\nMake it short."}], True),
    ([{"role": "system", "content": ""}, {"role": "user", "content": ""}], True),
    ([{"role": "assistant", "content": "I speak first."}], True),
    ([{"role": "user", "content": "caf\u00e9 \u4f60\u597d \U0001f600 <|im_end|> {{ x }} {% raw %}"}], True),
    ([{"role": "tool", "content": "{\"temp\": 21}"}, {"role": "user", "content": "ok"}], False),
    ([], True),
]


def chat_lines(template):
    try:
        import jinja2
        import jinja2.sandbox
    except ImportError:
        print("jinja2 missing: chat template reference not written", file=sys.stderr)
        return None
    # The environment Hugging Face transformers and llama-cpp-python use.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(template)
    lines = []
    for messages, add_gen in CHAT_CASES:
        rendered = tmpl.render(messages=messages, add_generation_prompt=add_gen,
                               bos_token="<|im_start|>", eos_token="<|im_end|>")
        lines.append({"messages": messages, "add_generation_prompt": add_gen,
                      "rendered": rendered})
    return lines


def write_jsonl(path, header, lines):
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(json.dumps(header, ensure_ascii=True, sort_keys=True) + "\n")
        for entry in lines:
            f.write(json.dumps(entry, ensure_ascii=True) + "\n")
    print("wrote %s (%d entries)" % (path, len(lines)), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    model_dir = os.environ.get("WEFT_MODEL_DIR", os.path.join(REPO_ROOT, "models"))
    ap.add_argument("--model", default=os.path.join(model_dir, DEFAULT_MODEL_FILE))
    ap.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "tests", "testdata"))
    ap.add_argument("--llama_build", default="0c1e570",
                    help="llama.cpp build id recorded in the output")
    ap.add_argument("--random_corpus", type=int, default=0, metavar="N",
                    help="instead, write N random strings (differential testing; not "
                         "committed) to --random_out; run tokenizer_corpus_test with "
                         "WEFT_TOKENIZER_CORPUS=<that file>")
    ap.add_argument("--random_out", default="/tmp/tokenizer_random_corpus.jsonl")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    vocab = Vocab(args.model)
    header = {
        "meta": {
            "generator": "tools/refdata/make_tokenizer_ref.py",
            "llama_cpp_build": args.llama_build,
            "model_file": os.path.basename(args.model),
            "model_sha256": sha256_file(args.model),
            "tokenize_call": "llama_tokenize(vocab, text, add_special=false, parse_special)",
            **vocab.meta(),
        }
    }
    if args.random_corpus > 0:
        strings = tokenizer_corpus_strings.random_corpus(args.random_corpus, args.seed)
        write_jsonl(args.random_out, header, corpus_lines(vocab, strings))
        return
    os.makedirs(args.out_dir, exist_ok=True)
    write_jsonl(os.path.join(args.out_dir, "tokenizer_corpus.jsonl"), header,
                corpus_lines(vocab, tokenizer_corpus_strings.corpus()))

    from gguf import GGUFReader
    template = GGUFReader(args.model).fields["tokenizer.chat_template"].contents()
    chats = chat_lines(template)
    if chats is not None:
        chat_header = {"meta": {"generator": "tools/refdata/make_tokenizer_ref.py",
                                "renderer": "jinja2 ImmutableSandboxedEnvironment("
                                            "trim_blocks=True, lstrip_blocks=True)",
                                "model_file": os.path.basename(args.model),
                                "template": template}}
        write_jsonl(os.path.join(args.out_dir, "chat_template_ref.jsonl"), chat_header, chats)


if __name__ == "__main__":
    main()
