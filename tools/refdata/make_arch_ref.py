#!/usr/bin/env python3
"""Writes llama.cpp and numpy reference outputs of the tiny synthetic models.

For each tiny preset of tools/synth/make_model.py (tiny-llama, tiny-llama3, tiny-qwen2,
tiny-qwen3, tiny-gemma3; type mix tiny-mix, seed 1) it writes the model into a temporary
folder, then tests/testdata/arch_ref_<preset>.json (format: tests/testdata/README.md):
  * for 3 prompts of token ids (seeded; 7, 48 and 100 tokens: the 32-token window of
    tiny-gemma3 cuts the longer two): the last position's logits from llama.cpp (its CPU
    kernels: 8-bit activations against the quantized weights, f16 KV cache) and from the
    fp32 numpy forward pass of tools/refdata/numpy_llama_ref.py (exact dequantized
    weights, no rounding of activations);
  * 32 greedy tokens of llama.cpp per prompt, with its top-3 ids and logits per step;
  * llama.cpp's own error e = max over prompts of max|llama - numpy| / max|numpy|, and
    the tolerance Weft is held to, fixed here before any Weft run: 3 e. Weft's int8 paths
    round activations as llama.cpp does (8 bits per block of 32) and their error is
    independent of llama.cpp's, so |Weft - llama.cpp| <= |Weft - exact| + |exact -
    llama.cpp| is about 2 e; 3 e leaves room for the maximum over positions. Weft's fp32
    reference path is held to numpy at 1e-3 (the default model's criterion).

llama.cpp is driven through its C API (llama-cpp-python's ctypes bindings over the
shared libraries of a llama.cpp build, LLAMA_CPP_LIB_PATH), with make_llama_ref.py's
settings (2 threads, CPU, n_ctx 512, f16 KV cache, flash attention auto, no extra
buffer types). The test (worker/model:architectures_accuracy_test) regenerates each
model at test time and checks its sha256 against the one recorded here.

  LLAMA_CPP_LIB_PATH=/work/ref/llama-build/bin <venv>/bin/python \\
      tools/refdata/make_arch_ref.py --out_dir tests/testdata
(venv: gguf 0.19.0, numpy 2.4.6 and llama-cpp-python 0.3.36 installed from its sdist
with CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF", which compiles
nothing.)
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "synth"))

import make_llama_ref  # noqa: E402  (Runner, top_ids, sha256_file)
import make_model  # noqa: E402
import numpy_llama_ref  # noqa: E402

PRESETS = ["tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"]
MIX = "tiny-mix"
SEED = 1
PROMPT_LENGTHS = [7, 48, 100]
GREEDY_TOKENS = 32
TOLERANCE_FACTOR = 3.0


def prompts(vocab):
    rng = np.random.default_rng(2027)
    return [[int(t) for t in rng.integers(1, vocab, n)] for n in PROMPT_LENGTHS]


def g6(x):
    return float("%.6g" % float(x))


def greedy(runner, ids):
    """The prompt as one batch, then one token per decode; argmax, ties to the smaller id."""
    runner.clear()
    row = runner.decode(ids, 0, lambda i: i == len(ids) - 1)[0]
    last = row.copy()
    gen, tops, top_logits = [], [], []
    for step in range(GREEDY_TOKENS):
        top = make_llama_ref.top_ids(row, 3)
        gen.append(top[0])
        tops.append(top)
        top_logits.append([g6(row[t]) for t in top])
        if step + 1 < GREEDY_TOKENS:
            row = runner.decode([top[0]], len(ids) + step, lambda i: True)[0]
    return last, gen, tops, top_logits


def reference(preset, tmp, threads, build):
    path = os.path.join(tmp, f"{preset}.{MIX}.s{SEED}.gguf")
    make_model.write_model(preset, MIX, SEED, path)
    vocab = make_model.PRESETS[preset]["vocab"]
    cases = prompts(vocab)
    m = numpy_llama_ref.Model(path)
    head = numpy_llama_ref.lm_head(m)
    exact = [h[-1] @ head.T for h in numpy_llama_ref.forward(m, cases)]
    runner = make_llama_ref.Runner(path, threads)
    assert runner.n_vocab == vocab, runner.n_vocab
    out, errors = [], []
    for ids, ex in zip(cases, exact):
        last, gen, tops, top_logits = greedy(runner, ids)
        err = float(np.abs(last - ex).max() / np.abs(ex).max())
        errors.append(err)
        out.append({"ids": ids, "llama_logits": [g6(x) for x in last],
                    "numpy_logits": [g6(x) for x in ex], "llama_vs_numpy": g6(err),
                    "greedy": gen, "greedy_top_ids": tops, "greedy_top_logits": top_logits})
    e = max(errors)
    meta = {"generator": "tools/refdata/make_arch_ref.py", "llama_cpp_build": build,
            "model": {"preset": preset, "types": MIX, "seed": SEED,
                      "file": os.path.basename(path), "bytes": os.path.getsize(path),
                      "sha256": make_llama_ref.sha256_file(path),
                      "maker": "tools/synth/make_model.py"},
            "settings": {"n_ctx": make_llama_ref.N_CTX, "threads": threads, "kv_cache": "f16",
                         "flash_attn": "auto", "extra_buffer_types": False, "backend": "CPU"},
            "vocab_size": vocab}
    doc = {"meta": meta, "llama_vs_numpy_max": g6(e),
           "tolerance": g6(TOLERANCE_FACTOR * e),
           "tolerance_rule": "3 x llama_vs_numpy_max, relative to max |numpy logit| "
                             "(fixed before comparing Weft; see the script)",
           "prompts": out}
    print(f"{preset}: llama.cpp vs numpy {['%.3g' % x for x in errors]}, tolerance "
          f"{TOLERANCE_FACTOR * e:.3g}", file=sys.stderr)
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out_dir", default=os.path.join(HERE, "..", "..", "tests", "testdata"))
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama_build", default="0c1e570")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            doc = reference(preset, tmp, args.threads, args.llama_build)
            with open(os.path.join(args.out_dir, f"arch_ref_{preset}.json"), "w") as f:
                json.dump(doc, f, separators=(",", ":"))
                f.write("\n")


if __name__ == "__main__":
    main()
