// A model that serves any batch and sequence length up to its maximum. Each new shape
// is compiled on first use and kept loaded; its kernels come from the JIT cache on
// disk after the first time on a machine, so a restarted host program pays only for
// the compile of the graph (milliseconds) and the weights' upload.
//
//   tlc::Model model("models/tinyllama.tl", {/*optLevel=*/2});
//   tlc::ForwardResult out = model.forward(tokens, /*batch=*/2, /*seqLen=*/40);
//   float loss = model.forward(tokens, 2, 40, logits);  // into the caller's buffer
//   model.forwardOnDevice({{deviceTokens, 80}, {deviceLogits, 80 * vocab}, nullptr, {stream}}, 2, 40);
//
// One thread at a time: serialize calls to a Model, or give each thread its own.
#pragma once

#include <tlc/Backend.h>
#include <tlc/Device.h>
#include <tlc/Export.h>
#include <tlc/Program.h>
#include <tlc/Span.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tlc {

struct ModelOptions {
  int optLevel = 2;              // 0..3: the workshop's V1..V4
  std::string dtype = "f32";     // storage dtype: f32 or bf16
  BackendOptions backend;        // where to run (target "auto": a GPU when one answers), threads, cache
  std::string weightsPath;       // safetensors with Hugging Face Llama keys; empty: seeded random
  uint64_t seed = 0;             // for random weights
  int maxLoadedShapes = 4;       // shapes kept loaded, each with its weights; the least recently used goes
};

class TLC_API Model {
public:
  // Parses and verifies the .tl file and opens the weights; compiles nothing yet.
  // Throws tlc::Error with the located diagnostics when the file is bad.
  explicit Model(const std::string &path, ModelOptions options = {});
  ~Model();
  Model(Model &&other) noexcept;
  Model &operator=(Model &&other) noexcept;

  const std::string &name() const;  // the file's tl.model
  int64_t vocab() const;
  int64_t maxSeqLen() const;        // the file's tl.max_seq_len

  // The forward of `batch` sequences of `seqLen` token ids (row-major). Compiles and
  // loads the shape on first use. Throws tlc::Error for a shape beyond the model, a
  // token count other than batch * seqLen, or an id outside the vocabulary.
  ForwardResult forward(Span<const int32_t> tokens, int64_t batch, int64_t seqLen);
  // The same, writing the fp32 logits [batch, seqLen, vocab] into `logits`; returns the loss.
  float forward(Span<const int32_t> tokens, int64_t batch, int64_t seqLen, Span<float> logits);
  // The forward on the caller's device memory and stream (GPU backends; as
  // Backend::forwardOnDevice: asynchronous, ordered on request.stream, with the same
  // checks and ownership). The request is checked against batch, seqLen and the
  // vocabulary before anything is compiled. The first use of a shape compiles and loads
  // it on the calling thread first, waiting for the weights' upload; a shape dropped
  // beyond maxLoadedShapes waits for its forwards still running.
  void forwardOnDevice(const DeviceForward &request, int64_t batch, int64_t seqLen);

  // The Program serving a shape (compiled and loaded if it was not): its kernels,
  // FLOPs and bytes, e.g. for a tlc::Profiler.
  const Program &program(int64_t batch, int64_t seqLen);
  // The backend serving a shape, loaded.
  const Backend &backend(int64_t batch, int64_t seqLen);

  int compiledShapes() const;  // shapes compiled so far (each once while it stays loaded)
  std::vector<std::pair<int64_t, int64_t>> loadedShapes() const;  // (batch, seqLen), most recent first

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace tlc
