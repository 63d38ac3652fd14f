// tl-soak: a tlc::Model serving many shapes for a long time, as a server does, with
// shapes evicted and compiled again; device memory, the driver objects alive and the
// host's resident memory must end where they started.
//
//   tl-soak MODEL.tl [--forwards=10000] [--shapes=8] [--keep=4] [--opt-level=2] [--target=auto|cpu|gpu|cuda|hip]
//
// Each step runs a burst of forwards (1 to 40) on one shape drawn at random, so shapes
// go in and out of the loaded set. Before the measurement at the start (after every
// shape has been compiled once) and at the end, the same fixed sequence of shapes runs,
// so the same shapes are loaded at both: the two lines must then agree exactly on the
// driver objects, within 2 MiB on device memory and within 5 % + 16 MiB on the host's. Every
// forward's logits are checked against that shape's first ones. Exit 1 otherwise.
#include "runtime/FlagRanges.h"
#include "runtime/JitBackend.h"
#include "runtime/Tensor.h"

#include <tlc/Error.h>
#include <tlc/Model.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

struct Options {
  std::string model;
  int64_t forwards = 10000, shapes = 8, keep = 4;
  int optLevel = 2;
  std::string target = "auto";
};

bool consume(const char *arg, const char *flag, std::string &value) {
  size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0 || arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

Options parse(int argc, char **argv) {
  Options options;
  std::string value;
  for (int i = 1; i < argc; ++i) {
    if (consume(argv[i], "--forwards", value)) options.forwards = tlc::parseFlagInteger("--forwards", value, {1, 10'000'000});
    else if (consume(argv[i], "--shapes", value)) options.shapes = tlc::parseFlagInteger("--shapes", value, {1, 64});
    else if (consume(argv[i], "--keep", value)) options.keep = tlc::parseFlagInteger("--keep", value, {1, 64});
    else if (consume(argv[i], "--opt-level", value)) options.optLevel = int(tlc::parseFlagInteger("--opt-level", value, {0, 3}));
    else if (consume(argv[i], "--target", value)) options.target = value;
    else if (argv[i][0] != '-' && options.model.empty()) options.model = argv[i];
    else throw tlc::Error(fmt::format("unexpected argument '{}'", argv[i]));
  }
  if (options.model.empty()) throw tlc::Error("usage: tl-soak MODEL.tl [--forwards=N] [--shapes=N] [--keep=N] [--opt-level=N] [--target=T]");
  if (options.keep >= options.shapes) throw tlc::Error("--keep must be less than --shapes, or nothing is ever evicted");
  return options;
}

double residentMiB() {
  long pages = 0, resident = 0;
  if (FILE *statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return double(resident) * double(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

struct Reading {
  int64_t deviceBytes = -1;  // used on the device (all processes); -1 on the CPU
  tlc::DriverObjectCounts objects;
  double hostMiB = 0;
  std::string str() const {
    return fmt::format("device memory {}, driver objects {} ({}), host RSS {:.1f} MiB",
                       deviceBytes < 0 ? std::string("-") : fmt::format("{:.1f} MiB used", double(deviceBytes) / (1 << 20)),
                       objects.total(), objects.str(), hostMiB);
  }
};

} // namespace

int main(int argc, char **argv) {
  try {
    Options options = parse(argc, argv);
    // A handle of its own on the device, only to ask how much memory is in use.
    // --target=gpu: CUDA or HIP, whichever answers; none is a skip (exit 77), not a failure.
    std::unique_ptr<tlc::GpuDevice> probe;
    std::string why;
    if (options.target == "gpu" || options.target == "cuda" || options.target == "auto") probe = tlc::openCudaDevice(&why);
    if (!probe && (options.target == "gpu" || options.target == "hip" || options.target == "auto"))
      probe = tlc::openHipDevice(&why);
    if (!probe && options.target != "auto" && options.target != "cpu") {
      fmt::print("tl-soak: no GPU ({}): skipped\n", why);
      return 77;
    }
    if (options.target == "gpu") options.target = probe->vendor();
    auto read = [&] {
      Reading reading;
      if (probe) {
        tlc::CurrentDevice current(*probe);
        reading.deviceBytes = int64_t(probe->usedBytes());
      }
      reading.objects = tlc::liveDriverObjects();
      reading.hostMiB = residentMiB();
      return reading;
    };

    tlc::ModelOptions modelOptions;
    modelOptions.optLevel = options.optLevel;
    modelOptions.backend.target = options.target;
    modelOptions.backend.progress = false;
    modelOptions.maxLoadedShapes = int(options.keep);
    tlc::Model model(options.model, modelOptions);
    std::mt19937_64 random(1);
    std::vector<std::pair<int64_t, int64_t>> shapes;
    std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> tokens;
    std::map<std::pair<int64_t, int64_t>, std::vector<float>> firstLogits;
    int64_t maxSeq = std::min<int64_t>(model.maxSeqLen() > 0 ? model.maxSeqLen() : 64, 64);
    while (int64_t(shapes.size()) < options.shapes) {
      std::pair<int64_t, int64_t> shape{1 + int64_t(random() % 4), 1 + int64_t(random() % maxSeq)};
      if (tokens.count(shape)) continue;
      shapes.push_back(shape);
      std::vector<int32_t> &ids = tokens[shape];
      for (int64_t i = 0; i < shape.first * shape.second; ++i) ids.push_back(int32_t(random() % model.vocab()));
    }
    int64_t forwards = 0;
    auto forward = [&](std::pair<int64_t, int64_t> shape) {
      tlc::ForwardResult result = model.forward(tokens[shape], shape.first, shape.second);
      ++forwards;
      auto [first, inserted] = firstLogits.emplace(shape, result.logits.data);
      double error = inserted ? 0.0 : tlc::relativeError(result.logits.data, first->second);
      if (!(error < 1e-4))
        throw tlc::Error(fmt::format("batch {} x seq {}: forward {} differs from the shape's first by {}", shape.first,
                                     shape.second, forwards, error));
    };
    // Every shape compiled once (kernels into the JIT cache), then the same shapes loaded
    // at both readings: the last `keep` of the list, in order.
    auto settle = [&] {
      for (size_t i = shapes.size() - size_t(options.keep); i < shapes.size(); ++i) forward(shapes[i]);
    };
    for (const auto &shape : shapes) forward(shape);
    settle();
    const tlc::Backend &backend = model.backend(shapes.back().first, shapes.back().second);
    Reading start = read();
    fmt::print("tl-soak: {} at O{} on {}, {} shapes (batch 1-4 x seq 1-{}), {} kept loaded, {} forwards\n",
               model.name(), options.optLevel, backend.name(), options.shapes, maxSeq, options.keep, options.forwards);
    fmt::print("  start  {}\n", start.str());
    std::fflush(stdout);

    auto began = std::chrono::steady_clock::now();
    int compiledBefore = model.compiledShapes();
    int64_t soaked = forwards;
    while (forwards - soaked < options.forwards) {
      auto shape = shapes[random() % shapes.size()];
      for (int64_t burst = 1 + int64_t(random() % 40); burst > 0 && forwards - soaked < options.forwards; --burst)
        forward(shape);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    int compiles = model.compiledShapes() - compiledBefore;
    int64_t ran = forwards - soaked;
    settle();
    Reading end = read();
    fmt::print("  end    {}\n", end.str());
    fmt::print("  ran    {} forwards in {:.1f} s; {} shapes compiled again after eviction\n", ran, seconds,
               compiles);
    // The driver may keep a little memory of its own; what tlc holds comes back whole.
    bool flat = std::abs(end.deviceBytes - start.deviceBytes) <= (2 << 20) && end.hostMiB <= start.hostMiB * 1.05 + 16;
    for (int kind = 0; kind < int(tlc::DriverObject::kCount); ++kind) flat = flat && end.objects.live[kind] == start.objects.live[kind];
    fmt::print("  {}\n", flat ? "flat: the same driver objects, device memory within 2 MiB, host memory within 5 % + 16 MiB"
                              : "NOT FLAT: resources grew");
    if (compiles == 0) {
      fmt::print("  no shape was evicted: raise --shapes or lower --keep\n");
      return 1;
    }
    return flat ? 0 : 1;
  } catch (const tlc::Error &error) {
    fmt::print(stderr, "tl-soak: error: {}\n", error.what());
    return 1;
  }
}
