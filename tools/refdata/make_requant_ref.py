#!/usr/bin/env python3
"""Writes tests/testdata/requant_ref.json: llama.cpp's outputs on the default model
re-quantized by llama-quantize to Q4_K_M, Q6_K and Q5_0 (mixed-type files: Q5_0, Q5_1,
Q4_K, Q6_K, Q8_0 and F32 tensors), for worker/model:requant_accuracy_test
(tools/quant/full.sh runs it in ./test.sh --full).

Per model: the file's sha256 and size (a re-quantization must reproduce it byte for
byte: ggml's quantizer is portable C), its tensor types, llama-perplexity on
tests/testdata/ppl_text.txt, and 32 greedy tokens with llama.cpp's top 3 at each step
for each of 15 prompts (PROMPTS below; tools/refdata/llama_greedy_ref.cc, compiled here
outside the repository against the llama.cpp build).

  /work/ref/venv/bin/python tools/refdata/make_requant_ref.py \\
      --llama_bin /work/ref/llama-build/bin \\
      --llama_src /work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --work_dir ~/.cache/weft/models/requant

(llama.cpp build 0c1e570, as vendored by PyPI llama-cpp-python 0.3.36; the venv needs
PyPI gguf for the tensor-type table.) Settings as tools/refdata/make_llama_ref.py: CPU,
2 threads, context 512, f16 KV cache, flash attention auto, no extra buffer types.
"""

import argparse
import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TYPES = ["Q4_K_M", "Q6_K", "Q5_0"]
N_TOKENS = 32
THREADS = 2
N_CTX = 512
SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user, system=SMOL_SYSTEM):
    return ("<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n"
            "<|im_start|>assistant\n" % (system, user))


# 15 prompts written for this test (not those of llama_ref_greedy.json).
PROMPTS = [
    ("plain", "The largest planet in our solar system is"),
    ("plain", "In 1969, the first humans to walk on the Moon were"),
    ("plain", "A recipe for pancakes needs flour, eggs, and"),
    ("plain", "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n"),
    ("plain", "Monday, Tuesday, Wednesday,"),
    ("plain", "The library was quiet except for the sound of"),
    ("plain", "To convert Celsius to Fahrenheit, you"),
    ("plain", "SELECT name, age FROM users WHERE"),
    ("plain", "Photosynthesis is the process by which plants"),
    ("chat", chatml("What is the boiling point of water at sea level?")),
    ("chat", chatml("Give me two tips for sleeping better.")),
    ("chat", chatml("Write one sentence about autumn leaves.")),
    ("chat", chatml("What does HTTP stand for?")),
    ("chat", chatml("Name a famous painting by Leonardo da Vinci.")),
    ("chat", chatml("How many legs does a spider have?", system="You answer briefly.")),
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tensor_types(path):
    import gguf  # PyPI gguf (the reference venv)
    counts = collections.Counter()
    for t in gguf.GGUFReader(path).tensors:
        counts[t.tensor_type.name] += 1
    return dict(sorted(counts.items()))


def quantize(llama_bin, src, out, qtype):
    cmd = [os.path.join(llama_bin, "llama-quantize"), "--allow-requantize", src, out, qtype,
           str(THREADS)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError("llama-quantize failed:\n" + (res.stdout + res.stderr)[-3000:])


def perplexity(llama_bin, model, text_path):
    cmd = [os.path.join(llama_bin, "llama-perplexity"), "-m", model, "-f", text_path,
           "-c", str(N_CTX), "-t", str(THREADS), "-nr"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    out = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError("llama-perplexity failed:\n" + out[-3000:])
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    return {
        "command": "llama-perplexity -m %s -f tests/testdata/ppl_text.txt -c %d -t %d -nr"
                   % (os.path.basename(model), N_CTX, THREADS),
        "ppl": float(m.group(1)),
        "ppl_stderr": float(m.group(2)),
    }


def build_greedy_tool(llama_src, llama_bin, tmp):
    exe = os.path.join(tmp, "llama_greedy_ref")
    subprocess.run(["g++", "-O2", "-std=c++17",
                    "-I" + os.path.join(llama_src, "include"),
                    "-I" + os.path.join(llama_src, "ggml", "include"),
                    os.path.join(REPO_ROOT, "tools", "refdata", "llama_greedy_ref.cc"),
                    "-L" + llama_bin, "-lllama", "-lggml", "-lggml-base",
                    "-Wl,-rpath," + llama_bin, "-o", exe], check=True)
    return exe


def greedy(exe, model, tmp):
    prompts_path = os.path.join(tmp, "prompts.hex")
    with open(prompts_path, "w") as f:
        for _, p in PROMPTS:
            f.write(p.encode("utf-8").hex() + "\n")
    res = subprocess.run([exe, model, prompts_path, str(N_TOKENS), str(THREADS)],
                         capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert len(rows) == len(PROMPTS)
    return [dict(kind=k, prompt=p, **r) for (k, p), r in zip(PROMPTS, rows)]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama_bin", default="/work/ref/llama-build/bin")
    ap.add_argument("--llama_src",
                    default="/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp")
    ap.add_argument("--model",
                    default=os.path.join(REPO_ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--work_dir",
                    default=os.path.expanduser("~/.cache/weft/models/requant"))
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "tests", "testdata",
                                                  "requant_ref.json"))
    ap.add_argument("--llama_build", default="0c1e570")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    stem = os.path.basename(args.model).rsplit(".", 2)[0]  # SmolLM2-135M-Instruct
    text_path = os.path.join(REPO_ROOT, "tests", "testdata", "ppl_text.txt")
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_greedy_tool(args.llama_src, args.llama_bin, tmp)
        for qtype in TYPES:
            out = os.path.join(args.work_dir, "%s.%s.gguf" % (stem, qtype))
            quantize(args.llama_bin, args.model, out, qtype)
            entry = {
                "type": qtype,
                "file": os.path.basename(out),
                "sha256": sha256_file(out),
                "size": os.path.getsize(out),
                "tensor_types": tensor_types(out),
                "llama_perplexity": perplexity(args.llama_bin, out, text_path),
                "cases": greedy(exe, out, tmp),
            }
            print("%s: %s, ppl %.4f, types %s" % (qtype, entry["sha256"],
                                                 entry["llama_perplexity"]["ppl"],
                                                 entry["tensor_types"]), file=sys.stderr)
            models.append(entry)
    meta = {
        "generator": "tools/refdata/make_requant_ref.py",
        "llama_cpp_build": args.llama_build,
        "source_model": os.path.basename(args.model),
        "source_sha256": sha256_file(args.model),
        "quantize_command": "llama-quantize --allow-requantize SOURCE OUT TYPE %d" % THREADS,
        "n_generated": N_TOKENS,
        "settings": {"n_ctx": N_CTX, "n_batch": N_CTX, "n_ubatch": N_CTX, "threads": THREADS,
                     "kv_cache": "f16", "flash_attn": "auto", "extra_buffer_types": False,
                     "backend": "CPU"},
    }
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "models": models}, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
