// Compiles a .tl model at every optimization level, runs each on the best device
// (a GPU when present, else the CPU) with the same weights and tokens, and prints
// the loss and how far each level's logits are from O0's.
//
//   embed models/tinyllama.tl [batch] [seq]
#include <tlc/tlc.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s model.tl [batch] [seq]\n", argv[0]);
    return 1;
  }
  try {
    tlc::CompileOptions options;
    options.batch = argc > 2 ? std::atoll(argv[2]) : 1;
    options.seqLen = argc > 3 ? std::atoll(argv[3]) : 32;
    auto backend = tlc::createBackend({});
    tlc::Tensor reference;
    for (int level = 0; level <= 3; ++level) {
      options.optLevel = level;
      tlc::Program program = tlc::compileModelFile(argv[1], options);
      backend->load(program, tlc::Weights::random(program.parameters, /*seed=*/7));
      tlc::ForwardResult out = backend->forward(tlc::randomTokenIds(program, /*seed=*/7));
      if (level == 0) reference = out.logits;
      // (CompileOptions::persistent makes O3 one persistent kernel whose parts are O2's kernels.)
      std::printf("O%d on %s: %zu kernels in %zu launches, loss %.4f, logits rel. error vs O0 %.2e\n", level,
                  backend->name().c_str(), tlc::computeKernels(program).size(), program.kernels.size(), out.loss,
                  tlc::relativeError(out.logits.data, reference.data));
    }
  } catch (const tlc::Error &error) {
    std::fprintf(stderr, "embed: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
