// Prints what llama.cpp's tokenizer does with a vocabulary, for
// tools/refdata/make_vocab_corpus_ref.py (which compiles this file against a llama.cpp
// build's libllama, outside the repository, and writes tests/testdata/tokenizer_vocab/).
//
//   llama_vocab_dump VOCAB.gguf < texts      (one text per line, as lower-case hex)
//
// Output, one record per line:
//   meta <n_vocab> <bos> <eos> <eot> <add_bos> <add_eos>
//   eog <id>...             llama_vocab_is_eog
//   control <id>...         llama_vocab_is_control
//   piece <id> <hex> <hex>  llama_token_to_piece(special=false), (special=true)
//   then per input line:
//   ids <id>...             llama_tokenize(add_special=false, parse_special=true)
//   plain <id>...           llama_tokenize(add_special=false, parse_special=false)
//   special <id>...         llama_tokenize(add_special=true,  parse_special=true)
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::string Hex(const std::string& s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string Unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string Piece(const llama_vocab* vocab, llama_token id, bool special) {
  std::vector<char> buf(256);
  int n = llama_token_to_piece(vocab, id, buf.data(), buf.size(), 0, special);
  if (n < 0) {
    buf.resize(-n);
    n = llama_token_to_piece(vocab, id, buf.data(), buf.size(), 0, special);
  }
  return std::string(buf.data(), n);
}

void PrintIds(const char* tag, const llama_vocab* vocab, const std::string& text,
              bool add_special, bool parse_special) {
  std::vector<llama_token> ids(text.size() + 16);
  int n = llama_tokenize(vocab, text.data(), text.size(), ids.data(), ids.size(), add_special,
                         parse_special);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), text.size(), ids.data(), ids.size(), add_special,
                       parse_special);
  }
  std::printf("%s", tag);
  for (int i = 0; i < n; ++i) std::printf(" %d", ids[i]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf < hex-lines\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], params);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n = llama_vocab_n_tokens(vocab);
  std::printf("meta %d %d %d %d %d %d\n", n, llama_vocab_bos(vocab), llama_vocab_eos(vocab),
              llama_vocab_eot(vocab), llama_vocab_get_add_bos(vocab) ? 1 : 0,
              llama_vocab_get_add_eos(vocab) ? 1 : 0);
  std::printf("eog");
  for (int i = 0; i < n; ++i) {
    if (llama_vocab_is_eog(vocab, i)) std::printf(" %d", i);
  }
  std::printf("\ncontrol");
  for (int i = 0; i < n; ++i) {
    if (llama_vocab_is_control(vocab, i)) std::printf(" %d", i);
  }
  std::printf("\n");
  for (int i = 0; i < n; ++i) {
    std::printf("piece %d %s %s\n", i, Hex(Piece(vocab, i, false)).c_str(),
                Hex(Piece(vocab, i, true)).c_str());
  }
  for (std::string line; std::getline(std::cin, line);) {
    const std::string text = Unhex(line);
    PrintIds("ids", vocab, text, false, true);
    PrintIds("plain", vocab, text, false, false);
    PrintIds("special", vocab, text, true, true);
  }
  llama_model_free(model);
  return 0;
}
