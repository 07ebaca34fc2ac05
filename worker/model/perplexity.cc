#include "worker/model/perplexity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {

absl::Status PerplexityOptions::Validate() const {
  if (ctx < 4) return absl::InvalidArgumentError(absl::StrCat("--ctx ", ctx, " is below 4"));
  if (max_chunks == 0 || max_chunks < -1) {
    return absl::InvalidArgumentError("--chunks must be positive (or -1 for all)");
  }
  return absl::OkStatus();
}

double LogSoftmaxAt(absl::Span<const float> logits, int32_t token) {
  float max_logit = logits[0];
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum_exp = 0;
  for (float l : logits) sum_exp += std::exp(l - max_logit);
  return (logits[token] - max_logit) - std::log(sum_exp);
}

int64_t PerplexityChunks(size_t num_tokens, const PerplexityOptions& options) {
  const int64_t n = static_cast<int64_t>(num_tokens) / options.ctx;
  return options.max_chunks > 0 ? std::min<int64_t>(n, options.max_chunks) : n;
}

absl::StatusOr<PerplexityResult> Perplexity(
    Backend* backend, absl::Span<const int32_t> tokens, const PerplexityOptions& options,
    absl::FunctionRef<void(int64_t, absl::Span<const float>)> on_position,
    absl::FunctionRef<void(int32_t, double)> on_chunk) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  const int32_t ctx = options.ctx;
  if (ctx > backend->config().context_length) {
    return absl::InvalidArgumentError(absl::StrCat("--ctx ", ctx, " is over the model's context of ",
                                                   backend->config().context_length));
  }
  const int64_t n_chunk = PerplexityChunks(tokens.size(), options);
  if (n_chunk == 0) {
    return absl::InvalidArgumentError(absl::StrCat("need at least ", ctx, " tokens, have ",
                                                   tokens.size()));
  }
  const int32_t bs = backend->block_size();
  const int32_t blocks = (ctx + bs - 1) / bs;
  if (blocks > backend->num_kv_blocks()) {
    return absl::FailedPreconditionError(absl::StrCat("a chunk of ", ctx, " tokens needs ", blocks,
                                                      " KV blocks; the pool has ",
                                                      backend->num_kv_blocks()));
  }
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  const int32_t first = ctx / 2;
  const int32_t scored_per_chunk = ctx - 1 - first;

  PerplexityResult result;
  std::vector<double> nll;  // per scored position
  double sum = 0;           // of nll, in position order
  ForwardOutput out;
  std::vector<int32_t> input;  // a chunk with BOS first (options.bos_token)
  for (int64_t c = 0; c < n_chunk; ++c) {
    const absl::Span<const int32_t> chunk_tokens = tokens.subspan(c * ctx, ctx);
    ForwardBatch batch;
    SequenceChunk seq;
    seq.token_ids = chunk_tokens;
    if (options.bos_token >= 0) {
      input.assign(chunk_tokens.begin(), chunk_tokens.end());
      input[0] = options.bos_token;
      seq.token_ids = input;
    }
    seq.start_pos = 0;  // an empty cache: every position is (re)written
    seq.block_table = table;
    // Rows for positions first .. ctx-2 are the last scored_per_chunk + 1 tokens' minus
    // the very last one: ask for the last scored_per_chunk + 1 rows and skip the final.
    seq.num_logits = scored_per_chunk + 1;
    batch.sequences.push_back(seq);
    WEFT_RETURN_IF_ERROR(backend->Forward(batch, &out));
    if (out.num_rows != scored_per_chunk + 1) {
      return absl::InternalError(absl::StrCat("backend returned ", out.num_rows, " logits rows, want ",
                                              scored_per_chunk + 1));
    }
    for (int32_t r = 0; r < scored_per_chunk; ++r) {
      const int32_t pos = first + r;
      const absl::Span<const float> row(out.Row(r), out.vocab_size);
      nll.push_back(-LogSoftmaxAt(row, chunk_tokens[pos + 1]));
      sum += nll.back();
      on_position(c * ctx + pos, row);
    }
    result.running.push_back(std::exp(sum / static_cast<double>(nll.size())));
    on_chunk(static_cast<int32_t>(c), result.running.back());
  }
  const double n = static_cast<double>(nll.size());
  double sum2 = 0;
  for (double v : nll) sum2 += v * v;
  const double mean = sum / n;
  result.perplexity = std::exp(mean);
  // As llama.cpp: the standard error of the mean NLL, carried through exp().
  const double var = n > 1 ? (sum2 / n - mean * mean) / (n - 1) : 0;
  result.stderr_ppl = var > 0 ? result.perplexity * std::sqrt(var) : 0;
  result.num_scored = static_cast<int64_t>(nll.size());
  result.num_chunks = static_cast<int32_t>(n_chunk);
  return result;
}

}  // namespace weft
