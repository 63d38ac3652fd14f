// tlc train: the workshop's training loop on a compiled training step. Each step runs
// the forward, the backward and AdamW on the next batch and prints its loss,
// samples/s and tokens/s; the run ends with the workshop's summary (throughput, peak
// memory) and optionally saves the trained weights and the first step's gradients.
#pragma once

#include <tlc/Backend.h>
#include <tlc/Train.h>

#include "runtime/Distributed.h"
#include "runtime/RunInputs.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tlc {

struct TrainingRun {
  int64_t steps = 50;
  RunInputs inputs;            // the starting weights (file or seeded random) and the seed
  std::string dataPath;        // token ids to train on; empty: a seeded random batch each step
  AdamWOptions adamw;          // what the Program was compiled with, for the header
  std::string saveWeightsPath; // where to write the trained weights, or empty
  std::string saveGradientsPath; // where to write the first step's gradients, or empty
  bool progressBar = false;    // redraw a bar on stderr after each step (a terminal)
  // --profile: the backend times every launch (it was made with BackendOptions::profile);
  // the steps after the first are tabled at the end and, with a path, written as a trace.
  bool profile = false;
  std::string tracePath;
  // A data-parallel run (docs/distributed.md): this rank among them; null for one
  // process. Rank 0 alone prints and saves; every rank checks the weights agree at the end.
  std::shared_ptr<Communicator> ranks;
  std::string launcher;        // who started the ranks ("torchrun", "tlc train --nproc"), for the header
};

// Loads the weights into `backend`, trains for `run.steps` steps and prints as it goes.
// Throws tlc::Error on bad input (weights, data) or a backend that cannot train.
void train(const Program &program, Backend &backend, const TrainingRun &run);

} // namespace tlc
