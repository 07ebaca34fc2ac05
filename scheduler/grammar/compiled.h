// Private to scheduler/grammar: the XGrammar object behind a CompiledConstraint
// (grammar_engine.h), so that only this package's .cc files include XGrammar.
#ifndef WEFT_SCHEDULER_GRAMMAR_COMPILED_H_
#define WEFT_SCHEDULER_GRAMMAR_COMPILED_H_

#include <utility>

#include "xgrammar/xgrammar.h"

namespace weft::grammar_internal {

struct Compiled {
  explicit Compiled(xgrammar::CompiledGrammar g) : grammar(std::move(g)) {}
  xgrammar::CompiledGrammar grammar;
};

}  // namespace weft::grammar_internal

#endif  // WEFT_SCHEDULER_GRAMMAR_COMPILED_H_
