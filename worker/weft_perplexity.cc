// weft-perplexity: perplexity of a model on a text file, computed as llama.cpp's
// `llama-perplexity` does (worker/model/perplexity.h), so a model file or a kernel path
// can be checked against llama.cpp number for number.
//
//   weft-perplexity --model=models/X.gguf --file=tests/testdata/ppl_text.txt
//                   [--ctx=512 --chunks=-1 --threads=2 --kernels=auto --kv_dtype=f32]
// The file is read as llama-perplexity -f reads it (one trailing newline dropped) and
// tokenized as it does (BOS only if the GGUF asks for it; special-token texts not
// parsed). Stderr: progress with the running perplexity after each chunk
// ("[1]38.1806,[2]30.0957,..." as llama.cpp prints it), tokens/s, the uncertainty.
// Stdout, last line: "perplexity: X over N tokens" (N = scored positions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "common/gguf.h"
#include "common/kv_dtype.h"
#include "common/tokenizer.h"
#include "worker/backends/cpu_backend.h"
#include "worker/model/perplexity.h"

ABSL_FLAG(std::string, model, "models/SmolLM2-135M-Instruct.Q4_1.gguf", "GGUF model file");
ABSL_FLAG(std::string, file, "", "text file to score (required)");
ABSL_FLAG(int32_t, ctx, 512, "tokens per chunk (llama-perplexity -c)");
ABSL_FLAG(int32_t, chunks, -1, "at most this many chunks (-1: all)");
ABSL_FLAG(int32_t, threads, 2, "compute threads");
ABSL_FLAG(std::string, kernels, "auto", "CPU kernels (see weft-worker --help)");
ABSL_FLAG(std::string, kv_dtype, weft::KvDtypeName(weft::kDefaultKvDtype),
          weft::kKvDtypeFlagHelp);

namespace weft {
namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "weft-perplexity: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Main() {
  const std::string path = absl::GetFlag(FLAGS_file);
  if (path.empty()) return Fail("flags", absl::InvalidArgumentError("--file is required"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail("flags", absl::InvalidArgumentError("cannot read --file " + path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama-perplexity -f

  PerplexityOptions po;
  po.ctx = absl::GetFlag(FLAGS_ctx);
  po.max_chunks = absl::GetFlag(FLAGS_chunks);
  if (absl::Status s = po.Validate(); !s.ok()) return Fail("flags", s);
  auto kernels = ParseKernelChoice(absl::GetFlag(FLAGS_kernels));
  if (!kernels.ok()) return Fail("flags", kernels.status());

  auto file = GgufFile::Open(absl::GetFlag(FLAGS_model));
  if (!file.ok()) return Fail("cannot load the model", file.status());
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return Fail("cannot load the tokenizer", tokenizer.status());
  // llama-perplexity puts BOS first in every chunk of an add_bos vocabulary (Gemma).
  if ((*tokenizer)->add_bos()) po.bos_token = (*tokenizer)->bos_id();
  CpuBackendOptions bo;
  bo.model.num_threads = absl::GetFlag(FLAGS_threads);
  bo.model.kernels = *kernels;
  auto kv_dtype = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) return Fail("flags", kv_dtype.status());
  bo.model.kv_dtype = *kv_dtype;
  bo.num_kv_blocks = (po.ctx + bo.block_size - 1) / bo.block_size;
  auto backend = CpuBackend::Create(**file, bo);
  if (!backend.ok()) return Fail("cannot load the model", backend.status());

  EncodeOptions eo;
  eo.parse_special = false;
  const std::vector<int32_t> tokens = (*tokenizer)->Encode(text, eo);
  const int64_t n_chunk = PerplexityChunks(tokens.size(), po);
  std::fprintf(stderr, "weft-perplexity: %zu tokens, %lld chunks of %d, kernels %s\n",
               tokens.size(), static_cast<long long>(n_chunk), po.ctx,
               (*backend)->kernels().c_str());
  const auto start = std::chrono::steady_clock::now();
  auto result = Perplexity(
      backend->get(), tokens, po, [](int64_t, absl::Span<const float>) {},
      [](int32_t chunk, double running) {
        std::fprintf(stderr, "[%d]%.4f,", chunk + 1, running);
        std::fflush(stderr);
      });
  std::fprintf(stderr, "\n");
  if (!result.ok()) return Fail("perplexity", result.status());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "weft-perplexity: %.1f s, %.1f tokens/s evaluated; PPL = %.4f +/- %.5f\n",
               secs, static_cast<double>(result->num_chunks) * po.ctx / secs, result->perplexity,
               result->stderr_ppl);
  std::printf("perplexity: %.4f over %lld tokens\n", result->perplexity,
              static_cast<long long>(result->num_scored));
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  weft::ParseFlags(argc, argv, "weft-perplexity --model=FILE.gguf --file=TEXT [--ctx=512]");
  return weft::Main();
}
