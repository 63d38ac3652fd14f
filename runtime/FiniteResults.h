// Results that are not numbers are failures, said with where they first appeared: a
// forward's logits and loss, and the weights a training run saves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Backend.h"

namespace tlc {

// Whether the forward computes a loss: a sequence of one token has no next token to predict.
bool hasLoss(const Program &program);

// "" when the logits and (where there is one) the loss are finite; else what is not:
// the first logit that is not, as [batch, position, vocab index], and how many.
std::string nonFiniteResults(const Program &program, const ForwardResult &result);

// The Program's forward run on the CPU reference op by op, every result checked: the
// first op that writes a value that is not finite ("kernel 7 'tl_...' (block 0), op
// rmsnorm, writes inf into 'x' at element 5 from finite inputs"), or "".
std::string locateNonFinite(const Program &program, const Weights &weights, const std::vector<int32_t> &tokenIds,
                            int threads);

// Throws tlc::Error when nonFiniteResults() finds anything, with where the forward first
// made such a value (locateNonFinite, where the CPU can run the forward in moments).
void checkFiniteForward(const Program &program, const ForwardResult &result, const Weights &weights,
                        const std::vector<int32_t> &tokenIds, int threads);

// The first weight holding a value that is not finite ("tensor 'k' holds inf at element 3"), or "".
std::string nonFiniteWeight(const Weights &weights);

} // namespace tlc
