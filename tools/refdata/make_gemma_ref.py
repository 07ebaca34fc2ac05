#!/usr/bin/env python3
"""Writes llama.cpp's reference outputs for the real Gemma 3 270M (Q4_K_M).

Outputs, in --out_dir (tests/testdata/; formats in tests/testdata/README.md):
  gemma3_ref_greedy.json  32 greedy tokens (and the top 3 at each step) for 15 prompts
                          of plain text (the GGUF has no chat template), with the
                          prompts' token ids as llama.cpp tokenizes them (BOS first)
  gemma3_ref_ppl.json     tests/testdata/ppl_text.txt as llama-perplexity tokenizes it
                          (token ids, BOS first) and the perplexity it prints

Weft's test (//worker/model:gemma3_accuracy_test, in ./test.sh --full) drives the model
by these token ids, so it needs no SentencePiece tokenizer. Settings as
make_llama_ref.py: CPU, 2 threads, n_ctx 512, f16 KV cache, flash attention auto, no
extra buffer types (llama-perplexity -nr).

  BIN=/work/ref/llama-build/bin
  LLAMA_CPP_LIB_PATH=$BIN <venv>/bin/python tools/refdata/make_gemma_ref.py \\
      --model models/gemma-3-270m-q4_k_m.gguf --llama_bin $BIN
(venv as for make_arch_ref.py; the model: tools/bootstrap.sh --model gemma3-270m.)
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_llama_ref  # noqa: E402  (Runner, greedy, run_llama_perplexity, sha256_file)

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colors are",
    "1, 2, 3, 4, 5,",
    "Water boils at a temperature of",
    "import numpy as np\n\n# Create a 3x3 identity matrix\n",
    "The quick brown fox",
    "A recipe for pancakes: first, mix the flour and",
    "The largest planet in our solar system is",
    "In the year 1969, astronauts",
    "Photosynthesis is the process by which plants",
    "Dear hiring manager, I am writing to apply for",
    "The French word for cat is",
    "To be, or not to be, that is",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    model_dir = os.environ.get("WEFT_MODEL_DIR", os.path.join(HERE, "..", "..", "models"))
    ap.add_argument("--model", default=os.path.join(model_dir, MODEL_FILE))
    ap.add_argument("--llama_bin", default=os.environ.get("LLAMA_CPP_LIB_PATH"))
    ap.add_argument("--out_dir", default=os.path.join(HERE, "..", "..", "tests", "testdata"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama_build", default="0c1e570")
    args = ap.parse_args()
    if not args.llama_bin:
        ap.error("--llama_bin or $LLAMA_CPP_LIB_PATH is required")

    os.makedirs(args.out_dir, exist_ok=True)
    runner = make_llama_ref.Runner(args.model, args.threads)
    meta = {
        "generator": "tools/refdata/make_gemma_ref.py",
        "llama_cpp_build": args.llama_build,
        "model_file": os.path.basename(args.model),
        "model_sha256": make_llama_ref.sha256_file(args.model),
        "n_vocab": runner.n_vocab,
        "settings": {"n_ctx": make_llama_ref.N_CTX, "threads": args.threads, "kv_cache": "f16",
                     "flash_attn": "auto", "extra_buffer_types": False, "backend": "CPU"},
    }
    cases = []
    for p in PROMPTS:
        print("greedy: %r" % p[:40], file=sys.stderr, flush=True)
        case = make_llama_ref.greedy(runner, p)
        case["margins"] = [round(t[0] - t[1], 5) for t in case["top_logits"]]
        cases.append(case)
    with open(os.path.join(args.out_dir, "gemma3_ref_greedy.json"), "w") as f:
        json.dump({"meta": dict(meta, n_generated=make_llama_ref.GREEDY_TOKENS,
                                top=make_llama_ref.GREEDY_TOP),
                   "cases": cases}, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")

    text_path = os.path.join(HERE, "..", "..", "tests", "testdata", "ppl_text.txt")
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    if text.endswith("\n"):
        text = text[:-1]  # llama-perplexity -f drops one trailing newline
    print("tokenizing %s" % text_path, file=sys.stderr, flush=True)
    tokens = runner.tokenize(text, add_special=True, parse_special=False)
    print("llama-perplexity on %d tokens" % len(tokens), file=sys.stderr, flush=True)
    ppl = make_llama_ref.run_llama_perplexity(args.llama_bin, args.model, text_path,
                                              args.threads)
    bos = runner.L.llama_vocab_bos(runner.vocab)
    with open(os.path.join(args.out_dir, "gemma3_ref_ppl.json"), "w") as f:
        json.dump({"meta": dict(meta, text_file="tests/testdata/ppl_text.txt",
                                add_bos=True, bos=bos),
                   "tokens": tokens, "llama_perplexity": ppl}, f, separators=(",", ":"))
        f.write("\n")
    print("greedy: %d prompts; perplexity %.4f over %d tokens (%d chunks)"
          % (len(cases), ppl["ppl"], len(tokens), ppl["n_chunk"]), file=sys.stderr)


if __name__ == "__main__":
    main()
