#!/usr/bin/env python3
"""Independent numpy reference for Weft's forward pass.

Runs an fp32 forward pass of a GGUF in plain numpy, using the PyPI `gguf` package's
reader and dequantization (`gguf.quants.dequantize`) -- no code shared with Weft -- and
writes the last-position logits of a few fixed prompts (token ids below).
`//worker/model:llama_model_test` compares Weft's reference kernels against them.
Architectures: llama (with Llama 3's rope_freqs.weight and linear RoPE scaling), qwen2
(QKV biases), qwen3 (QK norms), gemma3 (embedding scale, QK norms, post-norms, GELU-tanh,
sliding-window layers with their own RoPE base), as llama.cpp's src/models/*.cpp compute
them; tools/refdata/make_arch_ref.py uses this forward pass as the exact reference of the
synthetic models (tools/synth/make_model.py).

Outputs (in --out_dir):
  numpy_ref_logits.bin   little-endian binary, read by the C++ test:
      char[8]  magic "WEFTNREF"
      u32      version (1)
      u32      num_prompts
      u32      vocab_size
      u32      reserved (0)
      u64      size in bytes of the GGUF file the logits came from
      num_prompts x { u32 n; i32 token_ids[n] }
      num_prompts x f32 logits[vocab_size]     (last position of each prompt)
  numpy_ref_logits.json  the same description for humans (prompts, top-5 ids, sha256).

RoPE: a llama-arch GGUF stores Q/K rows permuted (llama.cpp's convert script) so that
the rotation acts on adjacent pairs (x[2i], x[2i+1]) ("normal" RoPE, llama.cpp's
LLAMA_ROPE_TYPE_NORM). This script applies that convention, and with --check_rope also
(a) un-permutes the weights and applies Hugging Face's rotate_half ("NeoX") form,
asserting both give the same layer output, and (b) prints the prompt's mean negative
log-likelihood under the two conventions applied to the stored weights (the right one is
much lower).

Example (from the repository root):
  /path/to/venv/bin/python tools/refdata/numpy_llama_ref.py \
      --model "$WEFT_MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" --out_dir tests/testdata
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

# Prompts as token ids of SmolLM2's vocabulary (any ids < 49152 would do; these spell
# real text so the reference is also a sanity check: prompt 0 should predict " Paris").
PROMPTS = [
    # "The capital of France is"
    [504, 3575, 282, 4649, 314],
    # ChatML: "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n"
    #         "<|im_start|>assistant\n"
    [1, 4093, 198, 1780, 314, 260, 31469, 6740, 281, 260, 905, 47, 2, 198, 1, 520, 9531,
     198],
    # "Once upon a time, in a small village nestled between rolling hills ... she found"
    [6403, 1980, 253, 655, 28, 281, 253, 1165, 6560, 32047, 826, 13549, 12610, 284, 253,
     31472, 4626, 28, 665, 4161, 253, 1805, 8180, 3365, 14176, 617, 5732, 288, 2217, 260,
     3150, 2893, 874, 2291, 30, 5081, 5738, 1041, 736, 11368, 614, 1584, 28, 3123, 253,
     1165, 11831, 351, 6956, 284, 13855, 28, 284, 4549, 1683, 260, 6260, 2050, 1793, 1041,
     983],
]


ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


class Model:
    """Reads hyperparameters and dequantizes tensors on demand (fp32, numpy layout)."""

    def __init__(self, path):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self.arch = self.field("general.architecture")
        if arch not in ARCHS:
            raise SystemExit(f"unsupported architecture {arch!r}")
        a = arch + "."
        self.n_layer = int(self.field(a + "block_count"))
        self.n_embd = int(self.field(a + "embedding_length"))
        self.n_head = int(self.field(a + "attention.head_count"))
        self.n_head_kv = int(self.field(a + "attention.head_count_kv"))
        self.head_dim = int(self.field(a + "attention.key_length", self.n_embd // self.n_head))
        self.rope_dim = int(self.field(a + "rope.dimension_count", self.head_dim))
        self.rope_base = float(self.field(a + "rope.freq_base", 10000.0))
        self.eps = float(self.field(a + "attention.layer_norm_rms_epsilon"))
        self.gemma = arch == "gemma3"
        self.halves = arch != "llama"  # NEOX RoPE
        self.rope_scale = 1.0 / float(self.field(a + "rope.scaling.factor", 1.0))
        self.rope_factors = (self.weight("rope_freqs.weight")
                             if "rope_freqs.weight" in self.tensors else None)
        # Per layer: sliding window (0 = global) and RoPE base (gemma3's local layers).
        self.window = [0] * self.n_layer
        self.layer_base = [self.rope_base] * self.n_layer
        self.layer_scale = [self.rope_scale] * self.n_layer
        self.attn_scale = 1.0 / np.sqrt(self.head_dim)
        if self.gemma:
            if self.n_layer == 62:
                self.attn_scale = 1.0 / np.sqrt(self.n_embd // self.n_head)
            w = int(self.field(a + "attention.sliding_window", 0))
            pattern = int(self.field(a + "attention.sliding_window_pattern", 6))
            base_swa = float(self.field(a + "rope.freq_base_swa", 10000.0))
            for l in range(self.n_layer):
                if w > 0 and (pattern == 0 or l % pattern < pattern - 1):
                    self.window[l] = w
                    self.layer_base[l] = base_swa
                    self.layer_scale[l] = 1.0

    def field(self, key, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            if default is None:
                raise SystemExit(f"missing metadata key {key}")
            return default
        v = f.parts[f.data[0]]
        if f.types[0].name == "STRING":
            return bytes(v).decode()
        return v[0]

    def weight(self, name):
        t = self.tensors[name]
        shape = tuple(int(d) for d in reversed(t.shape))  # numpy order: [rows, row_len]
        return np.ascontiguousarray(
            dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32))


def rms_norm(x, w, eps):
    ms = np.mean(x.astype(np.float32) ** 2, axis=-1, keepdims=True, dtype=np.float32)
    return (x / np.sqrt(ms + np.float32(eps))) * w


def rope_angles(n_tokens, rope_dim, base, scale=1.0, factors=None):
    i = np.arange(rope_dim // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / rope_dim)
    if scale != 1.0:
        inv_freq = inv_freq * scale
    if factors is not None:
        inv_freq = inv_freq / factors.astype(np.float64)
    ang = np.arange(n_tokens, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope_adjacent(x, cos, sin, rope_dim):
    """x: [T, H, D]; rotates pairs (x[2i], x[2i+1]) of the first rope_dim dims."""
    out = x.copy()
    a = x[:, :, 0:rope_dim:2]
    b = x[:, :, 1:rope_dim:2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    out[:, :, 0:rope_dim:2] = a * c - b * s
    out[:, :, 1:rope_dim:2] = a * s + b * c
    return out


def rope_halves(x, cos, sin, rope_dim):
    """x: [T, H, D]; Hugging Face rotate_half: pairs (x[i], x[i + rope_dim/2])."""
    out = x.copy()
    h = rope_dim // 2
    a = x[:, :, :h]
    b = x[:, :, h:rope_dim]
    c = cos[:, None, :]
    s = sin[:, None, :]
    out[:, :, :h] = a * c - b * s
    out[:, :, h:rope_dim] = a * s + b * c
    return out


def unpermute(w, n_head):
    """Inverse of llama.cpp's convert-time permutation of Q/K rows (back to HF order)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def attention(q, k, v, n_head, n_head_kv, scale=None, window=0):
    """q: [T, Hq, D], k/v: [T, Hkv, D]; causal (keys p - window + 1 .. p with a window);
    returns [T, Hq*D]."""
    t, _, d = q.shape
    group = n_head // n_head_kv
    out = np.empty((t, n_head, d), dtype=np.float32)
    mask = np.triu(np.full((t, t), -np.inf, dtype=np.float32), k=1)
    if window > 0:
        mask = mask + np.tril(np.full((t, t), -np.inf, dtype=np.float32), k=-window)
    scale = np.float32(1.0 / np.sqrt(d) if scale is None else scale)
    for h in range(n_head):
        kh = h // group
        s = (q[:, h, :] @ k[:, kh, :].T) * scale + mask
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=-1, keepdims=True)
        out[:, h, :] = p @ v[:, kh, :]
    return out.reshape(t, n_head * d)


def gelu_tanh(g):
    c = np.float32(np.sqrt(2.0 / np.pi))
    return np.float32(0.5) * g * (np.float32(1) + np.tanh(c * (g + np.float32(0.044715) * g ** 3)))


def forward(m, prompts, rope=None, check_rope=False):
    """Runs every prompt through the model, one layer at a time (weights dequantized
    once per layer). Returns the final hidden states (after output_norm), [T, n_embd]."""
    rope = rope or ("halves" if m.halves else "adjacent")
    emb = m.weight("token_embd.weight")
    xs = [emb[np.array(p)] for p in prompts]
    if m.gemma:
        xs = [x * np.float32(np.sqrt(np.float32(m.n_embd))) for x in xs]
    tables = {}
    hd = m.head_dim
    names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
             "ffn_gate", "ffn_up", "ffn_down"]
    if m.arch in ("qwen3", "gemma3"):
        names += ["attn_q_norm", "attn_k_norm"]
    if m.gemma:
        names += ["post_attention_norm", "post_ffw_norm"]
    for l in range(m.n_layer):
        w = {n: m.weight(f"blk.{l}.{n}.weight") for n in names}
        if m.arch == "qwen2":
            w.update({n + "_b": m.weight(f"blk.{l}.{n}.bias")
                      for n in ("attn_q", "attn_k", "attn_v")})
        key = (m.layer_base[l], m.layer_scale[l])
        for i, x in enumerate(xs):
            if (key, i) not in tables:
                tables[(key, i)] = rope_angles(len(prompts[i]), m.rope_dim, key[0], key[1],
                                               m.rope_factors)
            cos, sin = tables[(key, i)]
            t = x.shape[0]
            h = rms_norm(x, w["attn_norm"], m.eps)
            q = h @ w["attn_q"].T
            k = h @ w["attn_k"].T
            v = h @ w["attn_v"].T
            if m.arch == "qwen2":
                q, k, v = q + w["attn_q_b"], k + w["attn_k_b"], v + w["attn_v_b"]
            q = q.reshape(t, m.n_head, hd)
            k = k.reshape(t, m.n_head_kv, hd)
            v = v.reshape(t, m.n_head_kv, hd)
            if "attn_q_norm" in w:
                q = rms_norm(q, w["attn_q_norm"], m.eps)
                k = rms_norm(k, w["attn_k_norm"], m.eps)
            if rope == "adjacent":
                qr = rope_adjacent(q, cos, sin, m.rope_dim)
                kr = rope_adjacent(k, cos, sin, m.rope_dim)
            else:
                qr = rope_halves(q, cos, sin, m.rope_dim)
                kr = rope_halves(k, cos, sin, m.rope_dim)
            if check_rope and l == 0 and i == 0:
                check_rope_equivalence(m, h, qr, kr, w, cos, sin)
            a = attention(qr, kr, v, m.n_head, m.n_head_kv, m.attn_scale, m.window[l])
            o = a @ w["attn_output"].T
            if m.gemma:
                o = rms_norm(o, w["post_attention_norm"], m.eps)
            x = x + o
            h = rms_norm(x, w["ffn_norm"], m.eps)
            g = h @ w["ffn_gate"].T
            u = h @ w["ffn_up"].T
            act = (gelu_tanh(g) if m.gemma else g / (np.float32(1) + np.exp(-g))) * u
            f = act @ w["ffn_down"].T
            if m.gemma:
                f = rms_norm(f, w["post_ffw_norm"], m.eps)
            xs[i] = x + f
    norm = m.weight("output_norm.weight")
    return [rms_norm(x, norm, m.eps) for x in xs]


def check_rope_equivalence(m, h, qr, kr, w, cos, sin):
    """Adjacent-pair RoPE on GGUF-permuted weights == HF rotate_half on unpermuted ones."""
    t = h.shape[0]
    hd = m.head_dim
    q_hf = (h @ unpermute(w["attn_q"], m.n_head).T).reshape(t, m.n_head, hd)
    k_hf = (h @ unpermute(w["attn_k"], m.n_head_kv).T).reshape(t, m.n_head_kv, hd)
    q_hf = rope_halves(q_hf, cos, sin, m.rope_dim)
    k_hf = rope_halves(k_hf, cos, sin, m.rope_dim)
    # Scores are invariant to the (shared) permutation of head dims.
    s_gguf = np.einsum("thd,shd->hts", qr[:, :m.n_head_kv], kr)
    s_hf = np.einsum("thd,shd->hts", q_hf[:, :m.n_head_kv], k_hf)
    err = np.abs(s_gguf - s_hf).max() / np.abs(s_hf).max()
    print(f"rope check: adjacent-on-GGUF vs rotate_half-on-HF scores, rel err {err:.2e}",
          file=sys.stderr)
    assert err < 1e-5, err


def lm_head(m):
    name = "output.weight" if "output.weight" in m.tensors else "token_embd.weight"
    return m.weight(name)


def mean_nll(logits, ids):
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return float(np.mean(lse[:-1] - logits[np.arange(len(ids) - 1), ids[1:]]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_model = os.path.join(os.environ.get("WEFT_MODEL_DIR", "models"),
                                 "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--model", default=default_model)
    ap.add_argument("--out_dir", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "testdata"))
    ap.add_argument("--check_rope", action="store_true")
    args = ap.parse_args()

    m = Model(args.model)
    hidden = forward(m, PROMPTS, check_rope=args.check_rope)
    head = lm_head(m)
    vocab = head.shape[0]
    for p in PROMPTS:
        assert all(0 <= t < vocab for t in p)
    if args.check_rope:
        hidden_neox = forward(m, [PROMPTS[2]], rope="halves")
        for name, hs in (("adjacent", hidden[2]), ("halves", hidden_neox[0])):
            print(f"rope {name}: prompt 2 mean NLL {mean_nll(hs @ head.T, PROMPTS[2]):.3f}",
                  file=sys.stderr)
    logits = np.stack([h[-1] @ head.T for h in hidden]).astype("<f4")

    with open(args.model, "rb") as f:
        model_bytes = f.read()
    os.makedirs(args.out_dir, exist_ok=True)
    bin_path = os.path.join(args.out_dir, "numpy_ref_logits.bin")
    with open(bin_path, "wb") as f:
        f.write(b"WEFTNREF")
        f.write(struct.pack("<IIIIQ", 1, len(PROMPTS), vocab, 0, len(model_bytes)))
        for p in PROMPTS:
            f.write(struct.pack("<I", len(p)))
            f.write(np.array(p, dtype="<i4").tobytes())
        f.write(logits.tobytes())
    meta = {
        "description": "last-position fp32 logits of an independent numpy forward pass "
                       "(tools/refdata/numpy_llama_ref.py); layout in the script",
        "model_file": os.path.basename(args.model),
        "model_bytes": len(model_bytes),
        "model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "vocab_size": int(vocab),
        "prompts": PROMPTS,
        "top5": [[int(i) for i in np.argsort(-lg)[:5]] for lg in logits],
        "max_abs_logit": [float(np.abs(lg).max()) for lg in logits],
    }
    with open(os.path.join(args.out_dir, "numpy_ref_logits.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"wrote {bin_path}: {len(PROMPTS)} prompts x {vocab} logits", file=sys.stderr)


if __name__ == "__main__":
    main()
