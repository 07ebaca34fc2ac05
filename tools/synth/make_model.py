#!/usr/bin/env python3
"""Writes seeded synthetic GGUF models of the architectures Weft serves.

Every architecture of common/model_config.h (llama incl. Llama 3's rope_freqs, qwen2,
qwen3, gemma3) in any shape: tiny ones for tests (tiny-*: written at test time or into a
cache, never committed; llama.cpp's outputs on them are the committed references of
tests/testdata/arch_ref_*.json, tools/refdata/make_arch_ref.py) and the benchmark shapes
of BENCHMARKS.md (llama3-8b, qwen2.5-1.5b, ...) in llama-quantize-like type mixes.
Weights are random (uniform, magnitudes chosen so activations stay O(1)); quantized
blocks are written directly as random block bytes with bounded scales, so any type the
GGUF format knows can be produced without a quantizer. Same preset, types and seed =>
the same bytes (numpy's PCG64 stream; the file's sha256 is printed and the reference
JSON records it).

The vocabulary is a synthetic byte-level BPE one (tokenizer.ggml.model = gpt2, pre =
smollm: both llama.cpp and Weft load it): <|endoftext|> (control, BOS/EOS), the 256
GPT-2 byte symbols, then merged tokens up to the preset's vocabulary size. Tests drive
these models by token ids.

Usage (the gguf package: tools/bootstrap.sh --ref makes ~/.cache/weft/venv):
  ~/.cache/weft/venv/bin/python tools/synth/make_model.py --preset tiny-gemma3 --out DIR
  ~/.cache/weft/venv/bin/python tools/synth/make_model.py --preset llama3-8b \\
      --types q4_k_m --out DIR            # 4.6 GB
  ~/.cache/weft/venv/bin/python tools/synth/make_model.py --list
The file is DIR/<preset>.<types>.s<seed>.gguf; its path is printed on stdout.
"""

import argparse
import hashlib
import math
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

# ---- shapes ---------------------------------------------------------------------------
# arch, layers, hidden, ffn, heads, kv_heads, vocab, context, rope base; optional:
# head_dim (key_length), tied, window (gemma3 sliding window), swa_pattern,
# rope_base_swa, llama3 (rope_freqs.weight from Llama 3.1's scaling parameters).
PRESETS = {
    # Tiny models for tests (see tests/testdata/arch_ref_*.json).
    "tiny-llama": dict(arch="llama", layers=2, hidden=128, ffn=256, heads=4, kv_heads=2,
                       vocab=384, context=1024, rope_base=10000.0),
    "tiny-llama3": dict(arch="llama", layers=2, hidden=128, ffn=256, heads=4, kv_heads=1,
                        vocab=384, context=1024, rope_base=500000.0, tied=True, llama3=True),
    "tiny-qwen2": dict(arch="qwen2", layers=2, hidden=128, ffn=256, heads=4, kv_heads=2,
                       vocab=384, context=1024, rope_base=1000000.0, tied=True),
    "tiny-qwen3": dict(arch="qwen3", layers=2, hidden=128, ffn=256, heads=4, kv_heads=2,
                       head_dim=64, vocab=384, context=1024, rope_base=1000000.0),
    "tiny-gemma3": dict(arch="gemma3", layers=6, hidden=256, ffn=512, heads=2, kv_heads=1,
                        head_dim=256, vocab=384, context=1024, rope_base=1000000.0, tied=True,
                        window=32),
    # Benchmark and real-model shapes (../shared/BENCHMARKS.md).
    "llama3-8b": dict(arch="llama", layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8,
                      vocab=128256, context=8192, rope_base=500000.0, llama3=True),
    "qwen2.5-1.5b": dict(arch="qwen2", layers=28, hidden=1536, ffn=8960, heads=12,
                         kv_heads=2, vocab=151936, context=32768, rope_base=1000000.0,
                         tied=True),
    "qwen3-0.6b": dict(arch="qwen3", layers=28, hidden=1024, ffn=3072, heads=16, kv_heads=8,
                       head_dim=128, vocab=151936, context=40960, rope_base=1000000.0,
                       tied=True),
    "gemma3-270m": dict(arch="gemma3", layers=18, hidden=640, ffn=2048, heads=4, kv_heads=1,
                        head_dim=256, vocab=262144, context=32768, rope_base=1000000.0,
                        tied=True, window=512),
    "tinyllama-1.1b": dict(arch="llama", layers=22, hidden=2048, ffn=5632, heads=32,
                           kv_heads=4, vocab=32000, context=2048, rope_base=10000.0),
    "mistral-7b": dict(arch="llama", layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8,
                       vocab=32768, context=32768, rope_base=1000000.0),
}

# ---- type mixes -----------------------------------------------------------------------
# A mix maps a tensor's role (and layer) to a type; 1-D tensors are always F32.
K_FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}  # llama-quantize's


def use_more_bits(layer, n):
    """llama-quantize's layers that get more bits in the *_M mixes."""
    return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2


def type_for(mix, role, layer, n_layers, tied):
    """The type of a 2-D tensor: role is embd, output, q, k, v, o, gate, up or down."""
    if mix == "f32":
        return Q.F32
    if mix == "f16":
        return Q.F16
    if mix in ("q8_0", "q4_0", "q4_1"):
        return {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1}[mix]
    if mix == "tiny-mix":  # every type Weft's base build reads, mixed within the file
        return {"embd": Q.Q8_0, "output": Q.Q8_0, "q": Q.Q4_0, "k": Q.Q4_1, "v": Q.Q8_0,
                "o": Q.Q4_1, "gate": Q.Q4_0, "up": Q.Q4_1, "down": Q.Q8_0}[role]
    if mix == "q4_k_m":  # llama-quantize --type Q4_K_M's choices
        if role == "output" or (role == "embd" and tied):
            return Q.Q6_K
        if role in ("v", "down") and use_more_bits(layer, n_layers):
            return Q.Q6_K
        return Q.Q4_K
    if mix == "q4_0_m":  # the same pattern with the legacy types only
        if role == "output" or (role == "embd" and tied):
            return Q.Q8_0
        if role in ("v", "down") and use_more_bits(layer, n_layers):
            return Q.Q8_0
        return Q.Q4_0
    raise SystemExit(f"unknown type mix {mix!r}")


MIXES = ["f32", "f16", "q8_0", "q4_0", "q4_1", "tiny-mix", "q4_k_m", "q4_0_m"]

# ---- random tensors ---------------------------------------------------------------------


def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint8)


def random_blocks(rng, qtype, rows, k, s):
    """rows x k weights of `qtype` as random block bytes, magnitudes about s."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * (k // block)
    out = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    jitter = (0.5 + rng.random(nb)).astype(np.float32)
    def put16(off, val):
        out[:, off:off + 2] = f16(val).reshape(nb, 2)
    if qtype == Q.Q8_0:  # d, 32 x int8 (w = d q); keep q in [-127, 127]
        put16(0, s * jitter / 127)
        q = out[:, 2:].view(np.int8)
        q[q == -128] = -127
    elif qtype == Q.Q4_0:  # w = d (q - 8)
        put16(0, s * jitter / 8)
    elif qtype == Q.Q4_1:  # w = d q + m
        put16(0, 2 * s * jitter / 15)
        put16(2, -s * jitter)
    elif qtype == Q.Q5_0:  # w = d (q - 16)
        put16(0, s * jitter / 16)
    elif qtype == Q.Q5_1:
        put16(0, 2 * s * jitter / 31)
        put16(2, -s * jitter)
    elif qtype in (Q.Q4_K, Q.Q5_K):  # w = d sc q - dmin m, 6-bit sc / m
        put16(0, 2 * s * jitter / (63 * (15 if qtype == Q.Q4_K else 31)))
        put16(2, s * jitter / 63)
    elif qtype == Q.Q6_K:  # w = d sc (q - 32), int8 sc
        put16(208, s * jitter / (64 * 32))
    else:
        raise SystemExit(f"no random blocks for {qtype.name}")
    return out.reshape(rows, -1)


def matrix(rng, qtype, rows, k, s):
    """A 2-D tensor of rows x k (ggml ne = [k, rows]) as stored."""
    if qtype == Q.F32:
        return rng.uniform(-s, s, size=(rows, k)).astype(np.float32)
    if qtype == Q.F16:
        return rng.uniform(-s, s, size=(rows, k)).astype(np.float16)
    return random_blocks(rng, qtype, rows, k, s)


def vector(rng, n, lo, hi):
    return rng.uniform(lo, hi, size=n).astype(np.float32)


def llama3_rope_factors(base, dim, factor=8.0, low=1.0, high=4.0, orig=8192):
    """rope_freqs.weight as llama.cpp's converter computes it (rope_type llama3)."""
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / (base ** (i / dim))
        wavelen = 2 * math.pi / freq
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# ---- vocabulary ---------------------------------------------------------------------------


def byte_symbols():
    """GPT-2's byte -> unicode table (the 256 base tokens of a byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def vocabulary(size):
    """tokens, token types, merges: <|endoftext|>, 256 byte symbols, then merged
    lower-case letter strings (each the merge of a shorter token and one letter)."""
    tokens = ["<|endoftext|>"] + byte_symbols()
    types = [3] + [1] * 256
    merges = []
    known = set(tokens)
    frontier = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    letters = frontier[:]
    while len(tokens) < size:
        nxt = []
        for left in frontier:
            for ch in letters:
                if len(tokens) >= size:
                    break
                word = left + ch
                if word in known:
                    continue
                tokens.append(word)
                types.append(1)
                merges.append(f"{left} {ch}")
                known.add(word)
                nxt.append(word)
        frontier = nxt
    return tokens[:size], types[:size], merges


# ---- the model --------------------------------------------------------------------------


def tensor_plan(p, mix):
    """[(name, qtype, shape, make(rng) -> array)] in file order; shape is numpy's
    ((rows, k) for a matrix of rows of k weights, (n,) for a vector)."""
    arch = p["arch"]
    h, f, nh, nkv = p["hidden"], p["ffn"], p["heads"], p["kv_heads"]
    hd = p.get("head_dim", h // nh)
    n, vocab, tied = p["layers"], p["vocab"], p.get("tied", False)
    sh, sf = 1.7 / math.sqrt(h), 1.7 / math.sqrt(f)

    def mat(name, role, layer, rows, k, s):
        qt = type_for(mix, role, layer, n, tied)
        if k % gguf.GGML_QUANT_SIZES[qt][0] != 0:
            qt = K_FALLBACK.get(qt, qt)
        return (name, qt, (rows, k), lambda rng: matrix(rng, qt, rows, k, s))

    def vec(name, size, lo, hi):
        return (name, Q.F32, (size,), lambda rng: vector(rng, size, lo, hi))

    # A tied table is the LM head too: logits of O(1) need rows of about 1/sqrt(hidden)
    # (smaller for gemma3, whose embeddings are also scaled up by sqrt(hidden) on input).
    se = (1.5 if arch == "gemma3" else 3.5) / math.sqrt(h) if tied else 1.0
    plan = [mat("token_embd.weight", "embd", 0, vocab, h, se),
            vec("output_norm.weight", h, 0.8, 1.2)]
    if not tied:
        plan.append(mat("output.weight", "output", 0, vocab, h, sh))
    if p.get("llama3"):
        factors = llama3_rope_factors(p["rope_base"], hd)
        plan.append(("rope_freqs.weight", Q.F32, factors.shape, lambda rng: factors))
    for l in range(n):
        b = f"blk.{l}."
        plan += [vec(b + "attn_norm.weight", h, 0.8, 1.2),
                 mat(b + "attn_q.weight", "q", l, nh * hd, h, sh),
                 mat(b + "attn_k.weight", "k", l, nkv * hd, h, sh),
                 mat(b + "attn_v.weight", "v", l, nkv * hd, h, sh)]
        if arch == "qwen2":
            plan += [vec(b + "attn_q.bias", nh * hd, -0.5, 0.5),
                     vec(b + "attn_k.bias", nkv * hd, -0.5, 0.5),
                     vec(b + "attn_v.bias", nkv * hd, -0.5, 0.5)]
        if arch in ("qwen3", "gemma3"):
            plan += [vec(b + "attn_q_norm.weight", hd, 0.5, 1.5),
                     vec(b + "attn_k_norm.weight", hd, 0.5, 1.5)]
        plan.append(mat(b + "attn_output.weight", "o", l, h, nh * hd, sh))
        if arch == "gemma3":
            plan.append(vec(b + "post_attention_norm.weight", h, 0.5, 1.5))
        plan += [vec(b + "ffn_norm.weight", h, 0.8, 1.2),
                 mat(b + "ffn_gate.weight", "gate", l, f, h, sh),
                 mat(b + "ffn_up.weight", "up", l, f, h, sh),
                 mat(b + "ffn_down.weight", "down", l, h, f, sf)]
        if arch == "gemma3":
            plan.append(vec(b + "post_ffw_norm.weight", h, 0.5, 1.5))
    return plan


def stored_shape(qtype, shape):
    """(numpy dtype, array shape, bytes) of a tensor as matrix()/vector() return it."""
    if qtype == Q.F32:
        return np.dtype(np.float32), shape, 4 * int(np.prod(shape))
    if qtype == Q.F16:
        return np.dtype(np.float16), shape, 2 * int(np.prod(shape))
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, k = shape
    return np.dtype(np.uint8), (rows, k // block * size), rows * (k // block) * size


def write_metadata(w, name, p):
    arch = p["arch"]
    hd = p.get("head_dim", p["hidden"] // p["heads"])
    w.add_string("general.name", name)
    w.add_string("general.description", "Weft synthetic model (tools/synth/make_model.py): "
                 "random weights, for tests and benchmarks only")
    w.add_uint32(f"{arch}.block_count", p["layers"])
    w.add_uint32(f"{arch}.context_length", p["context"])
    w.add_uint32(f"{arch}.embedding_length", p["hidden"])
    w.add_uint32(f"{arch}.feed_forward_length", p["ffn"])
    w.add_uint32(f"{arch}.attention.head_count", p["heads"])
    w.add_uint32(f"{arch}.attention.head_count_kv", p["kv_heads"])
    if "head_dim" in p:
        w.add_uint32(f"{arch}.attention.key_length", hd)
        w.add_uint32(f"{arch}.attention.value_length", hd)
    w.add_float32(f"{arch}.rope.freq_base", p["rope_base"])
    w.add_uint32(f"{arch}.rope.dimension_count", hd)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6 if arch == "gemma3" else 1e-5)
    if p.get("window"):
        w.add_uint32(f"{arch}.attention.sliding_window", p["window"])
    if arch == "llama":
        w.add_uint32(f"{arch}.vocab_size", p["vocab"])
    tokens, types, merges = vocabulary(p["vocab"])
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", False)


def write_model(preset, mix, seed, path):
    """Tensor infos first, then each tensor's data as it is generated (a 4.6 GB model
    never sits in memory whole)."""
    p = PRESETS[preset]
    plan = tensor_plan(p, mix)
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, p["arch"])
    write_metadata(w, f"{preset}-{mix}-s{seed}", p)
    for name, qtype, shape, _ in plan:
        dtype, arr_shape, nbytes = stored_shape(qtype, shape)
        w.add_tensor_info(name, arr_shape, dtype, nbytes,
                          raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, qtype, shape, make in plan:
        arr = make(rng)
        assert arr.nbytes == stored_shape(qtype, shape)[2], name
        w.write_tensor_data(arr)
    w.close()
    os.replace(tmp, path)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--types", default=None, choices=MIXES,
                    help="type mix (default: tiny-mix for tiny-*, q4_k_m otherwise)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=".", help="output folder")
    ap.add_argument("--list", action="store_true", help="print the presets and exit")
    args = ap.parse_args()
    if args.list or not args.preset:
        for k, v in PRESETS.items():
            print(k, v)
        return 0 if args.list else 2
    mix = args.types or ("tiny-mix" if args.preset.startswith("tiny-") else "q4_k_m")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.preset}.{mix}.s{args.seed}.gguf")
    write_model(args.preset, mix, args.seed, path)
    print(f"{path} sha256 {sha256(path)} bytes {os.path.getsize(path)}", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
