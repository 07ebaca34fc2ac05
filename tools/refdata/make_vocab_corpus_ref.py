#!/usr/bin/env python3
"""Writes llama.cpp's tokenization of the tokenizer corpus for every vocabulary Weft
supports, as reference data for common/tokenizer_vocab_corpus_test.cc.

For each vocabulary (llama.cpp's models/ggml-vocab-*.gguf from the llama-cpp-python
sdist that tools/bootstrap.sh extracts, and Gemma 3 270M's GGUF) this compiles
tools/refdata/llama_vocab_dump.cc against a llama.cpp build (outside the repository),
runs it on the corpus and writes tests/testdata/tokenizer_vocab/<name>.jsonl:

  line 1: {"meta": {...}}  the vocabulary file and its sha256, vocab_size, bos, eos, eot,
          add_bos, add_eos, eog (ids), control (ids as [first, last] ranges),
          pieces_fnv1a64 / pieces_special_fnv1a64 (llama_token_to_piece of every id with
          special=false/true, hashed as make_tokenizer_ref.py does), llama_cpp_build
  then one line per string: {"i", "ids"} where i indexes the strings of
          tests/testdata/tokenizer_corpus.jsonl (tokenizer_corpus_strings.corpus(), the
          texts are not repeated) or, past them, {"i", "text" | "text_hex", "ids"} for the
          strings of EXTRA below; "ids_plain" when parse_special=false differs;
          "ids_special" (add_special=true) when it is not BOS + ids + EOS as add_bos /
          add_eos say.

  python3 tools/refdata/make_vocab_corpus_ref.py \\
      --llama_src /work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp \\
      --llama_lib /work/ref/llama-build/bin \\
      --gemma3 /work/ref/gemma/gemma-3-270m-q4_k_m.gguf

--vocab_dir defaults to $WEFT_CACHE_DIR (~/.cache/weft)/llama-cpp-python-0.3.36/models.
"""

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_ref  # noqa: E402  (fnv1a64, write_jsonl, sha256_file)
import tokenizer_corpus_strings  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Vocabularies (ggml-vocab-<name>.gguf) the reference covers: every one Weft supports.
VOCABS = ["llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35", "gpt-2", "mpt", "starcoder",
          "refact", "command-r", "falcon", "deepseek-llm", "deepseek-coder", "gemma-4"]

# Special-token texts and spacing of other vocabularies' families (the base corpus is
# SmolLM2-centric).
EXTRA = [
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk><mask>",
    "[INST] Hi [/INST]",
    "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] More [/INST]",
    " <s> spaced </s> ",
    "<|user|>\nHi<|end|>\n<|assistant|>\n",
    "<|system|>  x <|end|>  \n  y<|endoftext|>  z",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>Hi<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<|endoftext|><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>c",
    "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>",
    "\u2581 already escaped \u2581\u2581x",
    "\u2581\u2581",
    "tab\tand  double  spaces\t\t",
    "    four leading",
    "trailing    ",
    "<0x41> <unk> text",
    "\n\n\n\nnewlines\n\n",
    "A\n\nB\n\n\nC",
    "line\r\nline\r\n\r\n",
    "1 12 123 1234 12345 123456 1234567",
    "3.14159 -2.5e10 0x1F",
    "naïve façade ﬁ ligature Ⅻ ①",
]


def build_dump(llama_src, llama_lib, out_dir):
    exe = os.path.join(out_dir, "llama_vocab_dump")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama_vocab_dump.cc")
    subprocess.run(["g++", "-O1", "-std=c++17", "-I", os.path.join(llama_src, "include"),
                    "-I", os.path.join(llama_src, "ggml", "include"), src, "-L", llama_lib,
                    "-lllama", "-lggml", "-lggml-base", "-Wl,-rpath," + llama_lib, "-o", exe],
                   check=True)
    return exe


def ranges(ids):
    out = []
    for i in ids:
        if out and out[-1][1] + 1 == i:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def dump(exe, vocab_path, texts):
    stdin = "".join(t.hex() + "\n" for t in texts)
    res = subprocess.run([exe, vocab_path], input=stdin.encode(), stdout=subprocess.PIPE,
                         check=True)
    meta, pieces, pieces_special, records = None, [], [], []
    eog, control = [], []
    for line in res.stdout.decode().split("\n"):
        if not line:
            continue
        tag, _, rest = line.partition(" ")
        fields = rest.split(" ") if rest else []
        if tag == "meta":
            n, bos, eos, eot, add_bos, add_eos = (int(x) for x in fields)
            meta = {"vocab_size": n, "bos": bos, "eos": eos, "eot": eot,
                    "add_bos": bool(add_bos), "add_eos": bool(add_eos)}
        elif tag == "eog":
            eog = [int(x) for x in fields]
        elif tag == "control":
            control = [int(x) for x in fields]
        elif tag == "piece":
            pieces.append(bytes.fromhex(fields[1]) if len(fields) > 1 else b"")
            pieces_special.append(bytes.fromhex(fields[2]) if len(fields) > 2 else b"")
        else:
            if tag == "ids":
                records.append({})
            records[-1][tag] = [int(x) for x in fields]
    meta["eog"] = eog
    meta["control"] = ranges(control)
    meta["pieces_fnv1a64"] = make_tokenizer_ref.fnv1a64(pieces)
    meta["pieces_special_fnv1a64"] = make_tokenizer_ref.fnv1a64(pieces_special)
    return meta, records


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    cache = os.environ.get("WEFT_CACHE_DIR", os.path.expanduser("~/.cache/weft"))
    ap.add_argument("--llama_src", required=True, help="llama.cpp source (for include/)")
    ap.add_argument("--llama_lib", required=True, help="folder with libllama.so")
    ap.add_argument("--vocab_dir", default=os.path.join(cache, "llama-cpp-python-0.3.36", "models"))
    ap.add_argument("--gemma3", default="", help="Gemma 3 270M GGUF (optional)")
    ap.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "tests", "testdata",
                                                      "tokenizer_vocab"))
    ap.add_argument("--llama_build", default="0c1e570")
    args = ap.parse_args()

    base = tokenizer_corpus_strings.corpus()
    texts = [v if isinstance(v, bytes) else v.encode("utf-8") for _, v in base]
    texts += [t.encode("utf-8") for t in EXTRA]
    vocabs = [(name, os.path.join(args.vocab_dir, "ggml-vocab-%s.gguf" % name)) for name in VOCABS]
    if args.gemma3:
        vocabs.append(("gemma-3", args.gemma3))
    os.makedirs(args.out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_dump(args.llama_src, args.llama_lib, tmp)
        for name, path in vocabs:
            meta, records = dump(exe, path, texts)
            header = {"meta": {"generator": "tools/refdata/make_vocab_corpus_ref.py",
                               "llama_cpp_build": args.llama_build,
                               "vocab_file": os.path.basename(path),
                               "vocab_sha256": make_tokenizer_ref.sha256_file(path),
                               "base_corpus": "tokenizer_corpus.jsonl",
                               "num_base": len(base), **meta}}
            lines = []
            for i, rec in enumerate(records):
                entry = {"i": i}
                if i >= len(base):
                    entry["text"] = EXTRA[i - len(base)]
                entry["ids"] = rec["ids"]
                if rec["plain"] != rec["ids"]:
                    entry["ids_plain"] = rec["plain"]
                expect = ([meta["bos"]] if meta["add_bos"] else []) + rec["ids"] + (
                    [meta["eos"]] if meta["add_eos"] else [])
                if rec["special"] != expect:
                    entry["ids_special"] = rec["special"]
                lines.append(entry)
            make_tokenizer_ref.write_jsonl(os.path.join(args.out_dir, name + ".jsonl"), header,
                                           lines)


if __name__ == "__main__":
    main()
