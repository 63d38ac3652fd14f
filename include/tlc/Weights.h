// Model weights on the host, by checkpoint key: seeded random init or safetensors.
#pragma once

#include <tlc/Export.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <tlc/Program.h>
#include <tlc/Tensor.h>

namespace tlc {

class TLC_API Weights {
public:
  Weights() = default;
  Weights(const Weights &other);
  Weights &operator=(const Weights &other);
  Weights(Weights &&other) noexcept;
  Weights &operator=(Weights &&other) noexcept;

  // The workshop's init: normal(0, 0.02) for matrices, ones for norm gains. Each tensor
  // is drawn from its own stream seeded by (seed, key), so a tensor does not depend on
  // which other tensors exist, their order, or how many threads fill them
  // (threads = 0: one per hardware thread). Tensors are drawn when first read, and
  // concatenated() draws them straight into its result: a backend's load is the only
  // pass over a billion-parameter model's memory.
  static Weights random(const std::vector<Parameter> &parameters, uint64_t seed, int threads = 0);

  // safetensors (F32, BF16 or F16 tensors, widened to fp32), checked as the format's
  // specification says (duplicate keys, overlapping or stray data, misaligned tensors
  // and non-finite weights are errors). The file is mapped, not read: with
  // `parameters`, only their tensors are decoded, after every missing or mis-shaped one
  // has been named. Throws tlc::Error, also when the fp32 copies exceed free memory.
  static Weights loadSafetensors(const std::string &path);
  static Weights loadSafetensors(const std::string &path, const std::vector<Parameter> &parameters);
  void saveSafetensors(const std::string &path, DType dtype = DType::F32) const;

  // Throws tlc::Error naming every missing or mis-shaped parameter.
  void checkAgainst(const std::vector<Parameter> &parameters, const std::string &origin) const;

  const Tensor &at(const std::string &key) const;  // throws tlc::Error when missing

  // The data of a Program's Weight value: its keys' tensors concatenated along dim 0
  // (one key, or several after QKV merge / gate-up merge), each column then scaled by
  // the value's column-scale parameter if it has one (a folded RMSNorm gain). Throws
  // tlc::Error, naming `backend`, when they do not add up to the value's shape.
  std::vector<float> concatenated(const Value &value, const std::string &backend) const;
  bool contains(const std::string &key) const;
  void set(const std::string &key, Tensor tensor);
  const std::map<std::string, Tensor> &all() const;  // draws every pending random tensor

private:
  // A random tensor not drawn yet.
  struct Pending {
    std::vector<int64_t> shape;
    std::string init;     // normal, ones or zeros
    uint64_t stream = 0;  // normal: the stream's seed
  };
  void fill(const Pending &pending, float *data, size_t count) const;
  void drawPending() const;  // caller holds mutex_
  const Tensor &drawn(const std::string &key) const;  // at(), the caller holding mutex_

  mutable std::map<std::string, Tensor> tensors_;
  mutable std::map<std::string, Pending> pending_;
  mutable std::mutex mutex_;  // const readers draw pending tensors
  int threads_ = 0;
};

} // namespace tlc
