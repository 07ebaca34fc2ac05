// llama_greedy_ref: llama.cpp's greedy continuations of a list of prompts, for Weft's
// accuracy tests on re-quantized models (driven by tools/refdata/make_requant_ref.py,
// which compiles this file outside the repository against a llama.cpp build; not part of
// the Bazel build).
//
//   llama_greedy_ref MODEL.gguf PROMPTS.hex N_TOKENS THREADS > out.jsonl
//
// PROMPTS.hex: one prompt per line, its UTF-8 bytes in hex. For each prompt, one JSON line:
//   {"prompt_ids": [...], "generated": [...], "top_ids": [[3 ids] per step],
//    "top_logits": [[3 logits] per step]}
// as tools/refdata/make_llama_ref.py's greedy(): llama_tokenize(add_special = true,
// parse_special = true); the prompt decoded as one batch, then one token per decode;
// argmax with ties to the smaller id; generation does not stop at end-of-generation
// tokens. Context: n_ctx = n_batch = n_ubatch = 512, one sequence, f16 KV cache, flash
// attention auto, no extra buffer types (llama-perplexity -nr), CPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The 3 largest logits' ids, largest first, ties to the smaller id.
std::vector<int> Top3(const float* logits, int n_vocab) {
  std::vector<int> ids(n_vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 3, ids.end(), [&](int a, int b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  ids.resize(3);
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL PROMPTS.hex N_TOKENS THREADS\n", argv[0]);
    return 2;
  }
  const int n_tokens = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  llama_batch batch = llama_batch_init(512, 0, 1);
  std::ifstream in(argv[2]);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::string text = FromHex(line);
    std::vector<llama_token> ids(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                                 static_cast<int32_t>(ids.size()), true, true);
    if (n < 0 || n + n_tokens > 512) return 1;
    ids.resize(n);
    llama_memory_clear(llama_get_memory(ctx), true);
    auto decode = [&](const std::vector<llama_token>& toks, int pos0) {
      batch.n_tokens = static_cast<int32_t>(toks.size());
      for (size_t i = 0; i < toks.size(); ++i) {
        batch.token[i] = toks[i];
        batch.pos[i] = pos0 + static_cast<int>(i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i + 1 == toks.size();
      }
      if (llama_decode(ctx, batch) != 0) std::exit(1);
      return llama_get_logits_ith(ctx, batch.n_tokens - 1);
    };
    const float* logits = decode(ids, 0);
    std::string gen, tops, top_logits;
    for (int step = 0; step < n_tokens; ++step) {
      const std::vector<int> top = Top3(logits, n_vocab);
      gen += (step ? "," : "") + std::to_string(top[0]);
      tops += std::string(step ? "," : "") + "[" + std::to_string(top[0]) + "," +
              std::to_string(top[1]) + "," + std::to_string(top[2]) + "]";
      char buf[128];
      std::snprintf(buf, sizeof(buf), "%s[%.5f,%.5f,%.5f]", step ? "," : "", logits[top[0]],
                    logits[top[1]], logits[top[2]]);
      top_logits += buf;
      if (step + 1 < n_tokens) logits = decode({top[0]}, n + step);
    }
    std::string prompt_ids;
    for (int i = 0; i < n; ++i) prompt_ids += (i ? "," : "") + std::to_string(ids[i]);
    std::printf("{\"prompt_ids\":[%s],\"generated\":[%s],\"top_ids\":[%s],\"top_logits\":[%s]}\n",
                prompt_ids.c_str(), gen.c_str(), tops.c_str(), top_logits.c_str());
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
