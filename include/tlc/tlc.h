// tlc's C++ API, all of it. libtlc holds the compiler (MLIR inside, hidden), so a host
// program needs neither MLIR nor LLVM, and only the tlc:: symbols are visible to it.
//
// Serving any shape (compiled on first use):
//   tlc::Model model("tinyllama.tl", {/*optLevel=*/2});
//   tlc::ForwardResult out = model.forward(tokens, /*batch=*/4, /*seqLen=*/100);
//
// One shape by hand:
//   tlc::Program program = tlc::compileModelFile("tinyllama.tl", {/*optLevel=*/2, 8, 128, "bf16"});
//   auto backend = tlc::createBackend({"auto"});        // a GPU when one answers, else the CPU
//   backend->load(program, tlc::Weights::random(program.parameters, /*seed=*/0));
//   tlc::ForwardResult out = backend->forward(tlc::randomTokenIds(program, 0));
//
// On a GPU, token ids and logits in the caller's device memory, on the caller's stream:
//   backend->forwardOnDevice({{deviceTokens, count}, {deviceLogits, count * vocab}, deviceLoss, {stream}});
//
// Training (on a GPU or the CPU): compileTrainingStepFile, then
// Backend::trainStep per batch (see Train.h).
#pragma once

#include <tlc/Backend.h>
#include <tlc/Compile.h>
#include <tlc/Device.h>
#include <tlc/Error.h>
#include <tlc/Model.h>
#include <tlc/Profiler.h>
#include <tlc/Program.h>
#include <tlc/Tensor.h>
#include <tlc/Train.h>
#include <tlc/Version.h>
#include <tlc/Weights.h>
