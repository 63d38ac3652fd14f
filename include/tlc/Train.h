// Training: a .tl model's training step compiled to a Program, run by a backend.
//
//   tlc::Program step = tlc::compileTrainingStepFile("tinyllama.tl", {/*optLevel=*/2, 8, 128}, {/*lr=*/3e-4});
//   auto backend = tlc::createBackend({});              // a GPU if one answers, else the CPU
//   backend->load(step, tlc::Weights::random(step.parameters, /*seed=*/0));
//   for (int i = 0; i < 50; ++i) float loss = backend->trainStep(tokens).loss;
//   backend->trainedWeights().saveSafetensors("trained.safetensors");
#pragma once

#include <tlc/Compile.h>
#include <tlc/Export.h>
#include <tlc/Program.h>

#include <string>

namespace tlc {

// AdamW as torch.optim.AdamW, with the workshop's learning rate and weight decay;
// optionally the gradients are first clipped to a global L2 norm (clip_grad_norm_).
struct AdamWOptions {
  double learningRate = 3e-4;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
  double maxGradNorm = 0;  // 0: no clipping
};

// Parses and verifies a .tl file, specializes it, runs the level's passes on the
// forward, then tl-autodiff: the backward from every op's VJP and one AdamW update per
// parameter. The Program has kind train_step, carries the generated kernels of the
// forward, the backward and the optimizer, and runs with Backend::trainStep on the CPU
// or a GPU. Throws tlc::Error carrying the located diagnostics on failure.
TLC_API Program compileTrainingStepFile(const std::string &path, const CompileOptions &options,
                                        const AdamWOptions &adamw = {});

} // namespace tlc
