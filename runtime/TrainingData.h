// The token ids each training step reads: the workshop's random tokens (a fresh seeded
// batch every step), or a token file read as one stream, each step taking the next
// batch x seq ids and wrapping around at its end.
//
// A rank of a data-parallel run reads its share of the global batch: each step's
// ranks x batch x seq ids are what one process with the whole batch would read, and
// rank r takes the r-th batch x seq of them (random tokens too), so the ranks together
// train on exactly that process's data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Program.h"

namespace tlc {

class TrainingBatches {
public:
  // `path` empty: random tokens from `seed`. Throws tlc::Error on a file that cannot be
  // read, holds fewer ids than one step of every rank takes, or an id outside the
  // vocabulary.
  TrainingBatches(const Program &program, const std::string &path, uint64_t seed, int rank = 0, int ranks = 1);

  // The next step's batch x seq ids.
  std::vector<int32_t> next();

  // For the run's header: "seeded random, a new batch each step, seed 0" or the file.
  std::string describe() const;

private:
  const Program *program_;
  std::string path_;
  uint64_t seed_;
  int rank_, ranks_;
  std::vector<int32_t> corpus_;  // the file's ids
  int64_t step_ = 0;
  size_t position_ = 0;          // where the next global batch starts in corpus_
};

} // namespace tlc
