// Prompts the end-to-end tests share: different lengths (a few tokens to a couple of
// hundred, so long ones are prefilled in several chunks), plain text, code and ChatML.
// Thread-safety: constants.
#ifndef WEFT_TESTS_E2E_TEST_PROMPTS_H_
#define WEFT_TESTS_E2E_TEST_PROMPTS_H_

#include <string>
#include <vector>

namespace weft::e2e {

inline const std::vector<std::string>& TestPrompts() {
  static const auto* prompts = new std::vector<std::string>{
      "The capital of France is",
      "Once upon a time, in a small village by the sea,",
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
      "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n",
      "1, 2, 3, 4, 5, 6, 7, 8,",
      "The mitochondria is an organelle found in most eukaryotic cells. It generates most "
      "of the chemical energy needed to power the cell's biochemical reactions. Chemical "
      "energy produced by the mitochondria is stored in a small molecule called adenosine "
      "triphosphate. In summary, the main function of the mitochondria is",
      "Rivers begin in mountains and hills, where rain and melting snow collect into small "
      "streams. These streams join together as they flow downhill, becoming larger and "
      "stronger. Over thousands of years, rivers carve valleys and canyons into the land, "
      "carrying sediment from the highlands to the lowlands. When a river reaches the sea, "
      "it often slows down and drops this sediment, forming a delta. Deltas are some of "
      "the most fertile places on Earth, and many great civilizations grew up beside "
      "them. People have used rivers for drinking water, farming, transport and power "
      "for as long as there have been towns. Today, rivers face new challenges from "
      "pollution, dams and climate change, and scientists study them closely to "
      "understand how they will change in the future. One thing that makes rivers",
      "Translate to French: Good morning, how are you?",
  };
  return *prompts;
}

}  // namespace weft::e2e

#endif  // WEFT_TESTS_E2E_TEST_PROMPTS_H_
