// Serves a batch of prompts with tlc::Model and times every kernel with tlc::Profiler:
// the first call at a shape compiles it, later calls reuse it; a new shape compiles once.
//
//   serve models/tinyllama.tl [prompts] [tokens per prompt] [runs]
#include <tlc/tlc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A prompt's token ids; a real host would tokenize text here.
std::vector<int32_t> prompt(int index, int64_t length, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(int32_t((index * 131 + i * 17 + 1) % vocab));
  return ids;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s model.tl [prompts] [tokens per prompt] [runs]\n", argv[0]);
    return 1;
  }
  int prompts = argc > 2 ? std::atoi(argv[2]) : 4;
  int64_t length = argc > 3 ? std::atoll(argv[3]) : 32;
  int runs = argc > 4 ? std::atoi(argv[4]) : 5;
  try {
    tlc::ModelOptions options;
    options.optLevel = 2;
    options.backend.profile = true;  // per-kernel times in every ForwardResult
    tlc::Model model(argv[1], options);

    // The batch: every prompt, one after another, [prompts, length].
    std::vector<int32_t> batch;
    for (int p = 0; p < prompts; ++p) {
      std::vector<int32_t> ids = prompt(p, length, model.vocab());
      batch.insert(batch.end(), ids.begin(), ids.end());
    }
    auto start = std::chrono::steady_clock::now();
    tlc::ForwardResult first = model.forward(batch, prompts, length);
    std::printf("%s: batch %d x %lld on %s, first call %.1f ms (compile and load), loss %.4f\n", model.name().c_str(),
                prompts, (long long)length, model.backend(prompts, length).name().c_str(), millisecondsSince(start),
                first.loss);

    tlc::Profiler profiler(model.program(prompts, length), model.backend(prompts, length).name());
    start = std::chrono::steady_clock::now();
    for (int r = 0; r < runs; ++r) profiler.add(model.forward(batch, prompts, length).kernelTimes);
    std::printf("%d more calls: %.2f ms each, %d shape compiled\n\n%s", runs, millisecondsSince(start) / runs,
                model.compiledShapes(), profiler.table().c_str());

    // A shorter request: a new shape, compiled once on first use.
    std::vector<int32_t> single = prompt(0, length / 2, model.vocab());
    model.forward(single, 1, length / 2);
    model.forward(single, 1, length / 2);
    std::printf("\nafter a 1 x %lld request twice: %d shapes compiled, %zu loaded\n", (long long)(length / 2),
                model.compiledShapes(), model.loadedShapes().size());
  } catch (const tlc::Error &error) {
    std::fprintf(stderr, "serve: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
