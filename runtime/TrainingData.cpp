#include "runtime/TrainingData.h"

#include <fmt/format.h>

#include "runtime/Backend.h"
#include "runtime/TokenFile.h"

namespace tlc {

TrainingBatches::TrainingBatches(const Program &program, const std::string &path, uint64_t seed)
    : program_(&program), path_(path), seed_(seed) {
  if (!path.empty()) corpus_ = readTokenStream(path, program);
}

std::vector<int32_t> TrainingBatches::next() {
  int64_t step = step_++;
  if (path_.empty()) return randomTokenIds(*program_, seed_ + uint64_t(step));  // step 0: tlc --run's tokens
  std::vector<int32_t> batch(size_t(program_->batch * program_->seqLen));
  for (int32_t &id : batch) {
    id = corpus_[position_];
    position_ = (position_ + 1) % corpus_.size();
  }
  return batch;
}

std::string TrainingBatches::describe() const {
  if (path_.empty()) return fmt::format("seeded random, a new batch each step, seed {}", seed_);
  return fmt::format("file '{}': {} ids read in order, {} a step, wrapping around at its end", path_,
                     corpus_.size(), program_->batch * program_->seqLen);
}

} // namespace tlc
