#include "runtime/TrainingData.h"

#include <fmt/format.h>

#include "runtime/Backend.h"
#include "runtime/TokenFile.h"

namespace tlc {

TrainingBatches::TrainingBatches(const Program &program, const std::string &path, uint64_t seed, int rank, int ranks)
    : program_(&program), path_(path), seed_(seed), rank_(rank), ranks_(ranks) {
  if (!path.empty()) corpus_ = readTokenStream(path, program, program.batch * program.seqLen * ranks);
}

std::vector<int32_t> TrainingBatches::next() {
  int64_t step = step_++;
  const size_t tokens = size_t(program_->batch * program_->seqLen);
  if (path_.empty()) {  // step 0: tlc --run's tokens
    std::vector<int32_t> global = randomTokenIds(tokens * size_t(ranks_), program_->vocab, seed_ + uint64_t(step));
    return std::vector<int32_t>(global.begin() + ptrdiff_t(tokens * size_t(rank_)),
                                global.begin() + ptrdiff_t(tokens * size_t(rank_ + 1)));
  }
  std::vector<int32_t> batch(tokens);
  size_t at = (position_ + tokens * size_t(rank_)) % corpus_.size();
  for (int32_t &id : batch) {
    id = corpus_[at];
    at = (at + 1) % corpus_.size();
  }
  position_ = (position_ + tokens * size_t(ranks_)) % corpus_.size();
  return batch;
}

std::string TrainingBatches::describe() const {
  if (path_.empty())
    return fmt::format("seeded random, a new batch each step{}, seed {}",
                       ranks_ > 1 ? " (of every rank's, rank r the r-th share)" : "", seed_);
  int64_t tokens = program_->batch * program_->seqLen;
  if (ranks_ > 1)
    return fmt::format("file '{}': {} ids read in order, {} a step ({} a rank, rank r the r-th), wrapping around at "
                       "its end",
                       path_, corpus_.size(), tokens * ranks_, tokens);
  return fmt::format("file '{}': {} ids read in order, {} a step, wrapping around at its end", path_, corpus_.size(),
                     tokens);
}

} // namespace tlc
