#include "tests/e2e/openai_python.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace weft::e2e {

namespace {
constexpr absl::Duration kVenvTimeout = absl::Seconds(600);
// A hang guard: the proxy phase prefills two 100 KB prompts on shared cores.
constexpr absl::Duration kClientTimeout = absl::Seconds(600);
}  // namespace

const OpenAiVenv& OpenAiPython() {
  static const OpenAiVenv* venv = [] {
    auto* v = new OpenAiVenv;
    RunResult r = RunToEnd({"/bin/bash", Runfile("tests/e2e/openai_venv.sh")}, kVenvTimeout);
    if (r.code == 3) {
      v->skip = absl::StrCat("PyPI's openai client cannot be installed: ", r.log);
    } else if (r.code != 0) {
      v->error = absl::StrCat("openai_venv.sh failed (exit ", r.code, "):\n", r.log);
    } else {
      v->python = std::string(absl::StripAsciiWhitespace(r.out));
    }
    return v;
  }();
  return *venv;
}

nlohmann::json PrintedJson(const std::string& out, const std::string& key) {
  nlohmann::json found;
  const std::string prefix = key + ": ";
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::ConsumePrefix(&line, prefix)) {
      found = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    }
  }
  return found;
}

RunResult RunOpenAiScript(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {OpenAiPython().python, Runfile(script)};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunToEnd(argv, kClientTimeout);
}

RunResult RunOpenAiClient(const std::vector<std::string>& args) {
  return RunOpenAiScript("tests/e2e/openai_client.py", args);
}

}  // namespace weft::e2e
