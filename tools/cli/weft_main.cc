// weft: command-line client for a running weft-scheduler.
//
//   weft generate --server=HOST:PORT --prompt="..." [--max_tokens --temperature --seed
//                 --top_p --top_k --ignore_eos --stop=a,b --n --chat --print_token_ids
//                 --timeout_s --model]   streams the generated text to stdout
//   weft models  --server=HOST:PORT      lists served models
//   weft health  --server=HOST:PORT      prints SERVING / NOT_SERVING (exit 0 / 1)
//
// Stdout carries only generated text (or ids with --print_token_ids); everything else
// goes to stderr. Errors print the gRPC status and exit 2 (bad arguments) or 1.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/generate.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "scheduler public address host:port");
ABSL_FLAG(std::string, model, "", "model name (empty: the only one)");
ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(bool, chat, false, "send --prompt as one user message of a chat (ChatML)");
ABSL_FLAG(int32_t, max_tokens, -1, "tokens to generate (-1: server default)");
ABSL_FLAG(double, temperature, -1, "sampling temperature (-1: server default 1.0; 0 greedy)");
ABSL_FLAG(double, top_p, -1, "nucleus sampling (-1: default)");
ABSL_FLAG(int32_t, top_k, -1, "top-k (-1: default off)");
ABSL_FLAG(int64_t, seed, -1, "RNG seed (-1: server picks and reports it)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-sequence");
ABSL_FLAG(std::string, stop, "", "comma-separated stop strings");
ABSL_FLAG(int32_t, n, 1, "samples");
ABSL_FLAG(int32_t, priority, 0, "request priority (higher first)");
ABSL_FLAG(bool, print_token_ids, false, "print one token id per line instead of text");
ABSL_FLAG(double, timeout_s, 600, "call deadline in seconds");

namespace {

std::unique_ptr<weft::v1::Generation::Stub> Stub() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  auto ch = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_server),
                                      grpc::InsecureChannelCredentials(), args);
  return weft::v1::Generation::NewStub(ch);
}

int Fail(const grpc::Status& s) {
  std::cerr << "weft: " << s.error_code() << " " << s.error_message() << "\n";
  return 1;
}

int Generate() {
  weft::v1::GenerateRequest req;
  req.set_model(absl::GetFlag(FLAGS_model));
  if (absl::GetFlag(FLAGS_chat)) {
    auto* m = req.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(absl::GetFlag(FLAGS_prompt));
  } else {
    req.set_text(absl::GetFlag(FLAGS_prompt));
  }
  if (absl::GetFlag(FLAGS_max_tokens) >= 0) req.mutable_stopping()->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  if (absl::GetFlag(FLAGS_temperature) >= 0) req.mutable_sampling()->set_temperature(absl::GetFlag(FLAGS_temperature));
  if (absl::GetFlag(FLAGS_top_p) >= 0) req.mutable_sampling()->set_top_p(absl::GetFlag(FLAGS_top_p));
  if (absl::GetFlag(FLAGS_top_k) >= 0) req.mutable_sampling()->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_seed) >= 0) req.mutable_sampling()->set_seed(absl::GetFlag(FLAGS_seed));
  req.mutable_stopping()->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  if (!absl::GetFlag(FLAGS_stop).empty()) {
    for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_stop), ',')) {
      req.mutable_stopping()->add_stop(std::string(s));
    }
  }
  if (absl::GetFlag(FLAGS_n) != 1) req.set_n(absl::GetFlag(FLAGS_n));
  req.set_priority(absl::GetFlag(FLAGS_priority));

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000)));
  auto stub = Stub();
  auto reader = stub->Generate(&ctx, req);
  weft::v1::GenerateResponse resp;
  const bool ids = absl::GetFlag(FLAGS_print_token_ids);
  const bool multi = absl::GetFlag(FLAGS_n) > 1;
  while (reader->Read(&resp)) {
    if (resp.has_seed()) std::cerr << "weft: request " << resp.request_id() << " seed " << resp.seed() << "\n";
    if (ids) {
      for (int32_t t : resp.token_ids()) std::printf("%s%d\n", multi ? (std::to_string(resp.index()) + " ").c_str() : "", t);
    } else if (!resp.text().empty()) {
      std::fwrite(resp.text().data(), 1, resp.text().size(), stdout);
    }
    std::fflush(stdout);
    if (resp.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED) {
      std::cerr << "\nweft: sample " << resp.index() << " finished: "
                << weft::v1::FinishReason_Name(resp.finish_reason()) << "\n";
    }
    if (resp.has_usage()) {
      const auto& u = resp.usage();
      std::cerr << "weft: prompt " << u.prompt_tokens() << " (cached " << u.cached_prompt_tokens()
                << "), completion " << u.completion_tokens() << ", queue "
                << u.queue_time_seconds() << " s, ttft " << u.time_to_first_token_seconds() << " s\n";
    }
  }
  if (!ids) std::printf("\n");
  grpc::Status s = reader->Finish();
  return s.ok() ? 0 : Fail(s);
}

int Models() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  weft::v1::ListModelsResponse resp;
  grpc::Status s = Stub()->ListModels(&ctx, weft::v1::ListModelsRequest(), &resp);
  if (!s.ok()) return Fail(s);
  for (const auto& m : resp.models()) {
    std::cout << m.name() << "\tcontext " << m.context_length() << "\tvocab " << m.vocab_size()
              << "\treplicas " << m.num_replicas() << "\tfingerprint " << m.fingerprint().substr(0, 16)
              << (m.chat_template().empty() ? "" : "\tchat " + m.chat_template()) << "\n";
  }
  return 0;
}

}  // namespace

int Health();  // health_check.cc

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("weft generate|models|health --server=HOST:PORT [flags]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << "usage: weft generate|models|health --server=HOST:PORT [flags]\n";
    return 2;
  }
  const std::string cmd = args[1];
  if (cmd == "generate") return Generate();
  if (cmd == "models") return Models();
  if (cmd == "health") return Health();
  std::cerr << "weft: unknown command '" << cmd << "' (generate, models, health)\n";
  return 2;
}
