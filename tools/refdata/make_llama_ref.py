#!/usr/bin/env python3
"""Writes llama.cpp reference outputs for Weft's model-accuracy tests.

Outputs, in --out_dir (tests/testdata/; formats in tests/testdata/README.md):
  llama_ref_topk.json     teacher-forced top-5 ids/logits and the next token's
                          log-prob on tests/testdata/ppl_text.txt, chunked exactly as
                          llama-perplexity does, plus the perplexity that
                          llama-perplexity prints and the one this script computes
  llama_ref_greedy.json   32 greedy tokens (and top-3 at each step) for 14 prompts
  llama_ref_logits.json   3 short prompts (ids, metadata) ...
  llama_ref_logits.f32    ... and their last-position logits, float32 [3][n_vocab]

llama.cpp is driven through its C API (llama-cpp-python's ctypes bindings, with the
shared libraries of a llama.cpp build given by LLAMA_CPP_LIB_PATH), and the real
llama-perplexity binary is run from --llama_bin. Example (llama.cpp build 0c1e570, as
vendored by llama-cpp-python 0.3.36):

  BIN=/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin
  LLAMA_CPP_LIB_PATH=$BIN /work/ref/venv/bin/python tools/refdata/make_llama_ref.py \\
      --model /work/main/models/SmolLM2-135M-Instruct.Q4_1.gguf --llama_bin $BIN

Settings (both for the C API runs and for llama-perplexity): 2 threads, CPU, f16 KV
cache, flash attention "auto" (resolves to enabled on CPU), and NO extra buffer types
(llama-perplexity -nr / use_extra_bufts=false): this build's AMX repacked Q4_1 matmul
(ggml_backend_amx_mul_mat) segfaults on the Sapphire Rapids machines used here.
"""

import argparse
import ctypes
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_CTX = 512
TOP_K = 5
GREEDY_TOKENS = 32
GREEDY_TOP = 3

SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user, system=SMOL_SYSTEM):
    """The GGUF template's rendering (see common/chat_template.h) with the generation
    prompt."""
    return ("<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n"
            "<|im_start|>assistant\n" % (system, user))


GREEDY_PROMPTS = [
    ("plain", "The capital of France is"),
    ("plain", "Once upon a time, in a small village by the sea,"),
    ("plain", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("plain", "The three primary colors are"),
    ("plain", "1, 2, 3, 4, 5,"),
    ("plain", "Water boils at a temperature of"),
    ("plain", "import numpy as np\n\n# Create a 3x3 identity matrix\n"),
    ("plain", "The quick brown fox"),
    ("chat", chatml("What is the capital of Germany?")),
    ("chat", chatml("Write a haiku about the ocean.")),
    ("chat", chatml("Explain what a CPU does in one sentence.")),
    ("chat", chatml("List three fruits.")),
    ("chat", chatml("Translate 'good morning' into French.", system="You are a translator.")),
    ("chat", chatml("Hi!")),
]

LOGIT_PROMPTS = [
    "Hello, my name is",
    "The meaning of life is",
    chatml("What is 2+2?"),
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Runner:
    """One llama.cpp context over the C API: n_ctx = n_batch = n_ubatch = 512, one
    sequence, logits on request per token."""

    def __init__(self, model_path, threads):
        import llama_cpp as L  # needs LLAMA_CPP_LIB_PATH
        self.L = L
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = False  # = llama-perplexity -nr (see the module docstring)
        self.model = L.llama_model_load_from_file(model_path.encode(), mp)
        if not self.model:
            raise RuntimeError("cannot load " + model_path)
        cp = L.llama_context_default_params()
        cp.n_ctx = N_CTX
        cp.n_batch = N_CTX
        cp.n_ubatch = N_CTX
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_AUTO  # as llama-perplexity
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("cannot create a context")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.batch = L.llama_batch_init(N_CTX, 0, 1)

    def tokenize(self, text, add_special, parse_special):
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special,
                                  parse_special)
        if n < 0:
            raise RuntimeError("token buffer too small")
        return list(buf[:n])

    def clear(self):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def decode(self, tokens, start_pos, need_logits):
        """Decodes `tokens` at positions start_pos.. and returns the logits rows of the
        positions i with need_logits(i) (float32 [n_rows, n_vocab])."""
        b = self.batch
        b.n_tokens = len(tokens)
        rows = []
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = start_pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            want = need_logits(i)
            b.logits[i] = 1 if want else 0
            if want:
                rows.append(i)
        if self.L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        out = np.empty((len(rows), self.n_vocab), dtype=np.float32)
        for r, i in enumerate(rows):
            ptr = self.L.llama_get_logits_ith(self.ctx, i)
            out[r] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        return out


def log_softmax_at(logits, tok):
    """perplexity.cpp's log_softmax: float max, expf of (x - max) summed in double."""
    m = np.float32(logits.max())
    s = np.exp((logits - m).astype(np.float32), dtype=np.float32).astype(np.float64).sum()
    return float(np.float64(logits[tok] - m) - np.log(s))


def top_ids(logits, k):
    """Ids of the k largest logits, ties broken by the smaller id."""
    idx = np.lexsort((np.arange(len(logits)), -logits.astype(np.float64)))
    return [int(i) for i in idx[:k]]


def r5(x):
    return round(float(x), 5)


def teacher_forced(runner, text):
    """Mirrors llama-perplexity's perplexity(): no BOS for this model (add_special
    asks the GGUF), chunks of N_CTX tokens each from an empty cache, scoring the
    second half of each chunk (first = N_CTX/2; positions first..N_CTX-2 predict
    tokens first+1..N_CTX-1)."""
    tokens = runner.tokenize(text, add_special=True, parse_special=False)
    n_chunk = len(tokens) // N_CTX
    first = N_CTX // 2
    positions, nexts, ids, logits_out, logprobs = [], [], [], [], []
    nll = 0.0
    count = 0
    for c in range(n_chunk):
        start = c * N_CTX
        runner.clear()
        rows = runner.decode(tokens[start:start + N_CTX], 0, lambda i: i >= first)
        for j in range(N_CTX - 1 - first):
            row = rows[j]
            nxt = tokens[start + first + j + 1]
            lp = log_softmax_at(row, nxt)
            top = top_ids(row, TOP_K)
            positions.append(start + first + j)
            nexts.append(nxt)
            ids.append(top)
            logits_out.append([r5(row[t]) for t in top])
            logprobs.append(round(lp, 6))
            nll -= lp
            count += 1
    return {
        "tokens": tokens,
        "n_chunk": n_chunk,
        "first": first,
        "positions": positions,
        "next_token": nexts,
        "top_ids": ids,
        "top_logits": logits_out,
        "next_logprob": logprobs,
        "ppl_replica": float(np.exp(nll / count)),
        "n_scored": count,
    }


def run_llama_perplexity(llama_bin, model, text_path, threads):
    cmd = [os.path.join(llama_bin, "llama-perplexity"), "-m", model, "-f", text_path,
           "-c", str(N_CTX), "-t", str(threads), "-nr"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    out = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError("llama-perplexity failed (%d):\n%s" % (res.returncode, out[-2000:]))
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    chunks = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+)",
                       out)
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)]
    return {
        "command": "llama-perplexity -m %s -f tests/testdata/ppl_text.txt -c %d -t %d -nr"
                   % (os.path.basename(model), N_CTX, threads),
        "ppl": float(m.group(1)),
        "ppl_stderr": float(m.group(2)),
        "n_chunk": int(chunks.group(1)),
        "batch_size": int(chunks.group(3)),
        "running_ppl": running,
    }


def greedy(runner, prompt):
    ids = runner.tokenize(prompt, add_special=True, parse_special=True)
    runner.clear()
    row = runner.decode(ids, 0, lambda i: i == len(ids) - 1)[0]
    gen, tops, top_logits = [], [], []
    for step in range(GREEDY_TOKENS):
        top = top_ids(row, GREEDY_TOP)
        gen.append(top[0])
        tops.append(top)
        top_logits.append([r5(row[t]) for t in top])
        if step + 1 < GREEDY_TOKENS:
            row = runner.decode([top[0]], len(ids) + step, lambda i: True)[0]
    eog = [i for i, t in enumerate(gen) if runner.L.llama_vocab_is_eog(runner.vocab, t)]
    text = b"".join(piece(runner, t) for t in gen).decode("utf-8", errors="replace")
    return {"prompt": prompt, "prompt_ids": ids, "generated": gen, "top_ids": tops,
            "top_logits": top_logits, "first_eog": eog[0] if eog else -1, "text": text}


def piece(runner, tok):
    buf = ctypes.create_string_buffer(256)
    n = runner.L.llama_token_to_piece(runner.vocab, tok, buf, 256, 0, False)
    return buf.raw[:max(n, 0)]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    model_dir = os.environ.get("WEFT_MODEL_DIR", os.path.join(REPO_ROOT, "models"))
    ap.add_argument("--model", default=os.path.join(model_dir, DEFAULT_MODEL_FILE))
    ap.add_argument("--llama_bin", default=os.environ.get("LLAMA_CPP_LIB_PATH"),
                    help="folder with llama-perplexity (default: $LLAMA_CPP_LIB_PATH)")
    ap.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "tests", "testdata"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama_build", default="0c1e570")
    args = ap.parse_args()
    if not args.llama_bin:
        ap.error("--llama_bin or $LLAMA_CPP_LIB_PATH is required")

    text_path = os.path.join(args.out_dir, "ppl_text.txt")
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    if text.endswith("\n"):
        text = text[:-1]  # llama-perplexity -f drops one trailing newline

    runner = Runner(args.model, args.threads)
    meta = {
        "generator": "tools/refdata/make_llama_ref.py",
        "llama_cpp_build": args.llama_build,
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "n_vocab": runner.n_vocab,
        "settings": {"n_ctx": N_CTX, "n_batch": N_CTX, "n_ubatch": N_CTX,
                     "threads": args.threads, "kv_cache": "f16", "flash_attn": "auto",
                     "extra_buffer_types": False, "backend": "CPU"},
    }

    tf = teacher_forced(runner, text)
    ppl_bin = run_llama_perplexity(args.llama_bin, args.model, text_path, args.threads)
    topk = {"meta": dict(meta, text_file="tests/testdata/ppl_text.txt", top_k=TOP_K),
            "llama_perplexity": ppl_bin, **tf}
    with open(os.path.join(args.out_dir, "llama_ref_topk.json"), "w") as f:
        json.dump(topk, f, separators=(",", ":"))
        f.write("\n")
    print("perplexity: llama-perplexity %.4f, replica %.4f over %d tokens (%d scored)"
          % (ppl_bin["ppl"], tf["ppl_replica"], len(tf["tokens"]), tf["n_scored"]),
          file=sys.stderr)

    cases = [dict(kind=kind, **greedy(runner, p)) for kind, p in GREEDY_PROMPTS]
    with open(os.path.join(args.out_dir, "llama_ref_greedy.json"), "w") as f:
        json.dump({"meta": dict(meta, n_generated=GREEDY_TOKENS, top=GREEDY_TOP),
                   "cases": cases}, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")

    rows, infos = [], []
    for p in LOGIT_PROMPTS:
        ids = runner.tokenize(p, add_special=True, parse_special=True)
        runner.clear()
        row = runner.decode(ids, 0, lambda i, n=len(ids): i == n - 1)[0]
        rows.append(row)
        infos.append({"prompt": p, "prompt_ids": ids, "argmax": top_ids(row, 1)[0]})
    blob = np.stack(rows).astype("<f4")
    bin_path = os.path.join(args.out_dir, "llama_ref_logits.f32")
    blob.tofile(bin_path)
    with open(os.path.join(args.out_dir, "llama_ref_logits.json"), "w") as f:
        json.dump({"meta": dict(meta, data_file="llama_ref_logits.f32",
                                layout="float32 little-endian [n_prompts][n_vocab], "
                                       "logits of each prompt's last position",
                                data_sha256=sha256_file(bin_path)),
                   "prompts": infos}, f, ensure_ascii=True, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
