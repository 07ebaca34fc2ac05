#include "common/chat_template_claims.h"

#include <openssl/sha.h>

namespace weft {
namespace {

constexpr KnownChatTemplateDifference kKnownDifferences[] = {
    {"fcb749f5c5d6bbc4240db4e86af5dfcefe9c7e85355235d0f304ab4319ba6b51",
     "fireworks-ai-llama-3-firefunction-v2.jinja", false,
     "the template reads the variable `functions`, which Hugging Face does not pass: Jinja2 "
     "raises UndefinedError on every conversation where the engine renders"},
    {"bf9e9ee8c0f2297c6ff60af5fab357d7b34bc4375884ed16ab6aa90597d7eb7d",
     "CohereForAI-c4ai-command-r-plus-tool_use.jinja", true,
     "with tools the template reads fields OpenAI's tool shape lacks (tool.description): "
     "Jinja2 raises UndefinedError where the engine renders them empty"},
    {"0d11fd8d7cf3f212733d73dfe09ead89a14a18816661dc30ea1fb3147428fba1",
     "llama-cpp-deepseek-r1.jinja", true,
     "with tools the template applies tojson to map(...): Jinja2 cannot serialize the "
     "generator (TypeError) where the engine renders a list"},
    {"2fc9dbfaea552f864b4b8cdf9d17401e9a49cbda199498531f137eb0ec5ae1d8",
     "meetkai-functionary-medium-v3.1.jinja", true,
     "with tools the template adds text to '...'|safe: Jinja2's Markup HTML-escapes the tool "
     "JSON (&#34;), the engine does not"},
};

}  // namespace

std::string ChatTemplateSha256(absl::string_view s) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

const KnownChatTemplateDifference* FindKnownChatTemplateDifference(absl::string_view source) {
  const std::string sha = ChatTemplateSha256(source);
  for (const KnownChatTemplateDifference& k : kKnownDifferences) {
    if (sha == k.sha256) return &k;
  }
  return nullptr;
}

}  // namespace weft
