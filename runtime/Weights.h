// Model weights on the host, by checkpoint key: seeded random init or safetensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "runtime/Program.h"
#include "runtime/Tensor.h"

namespace tlc {

class Weights {
public:
  // The workshop's init: normal(0, 0.02) for matrices, ones for norm gains. Each tensor
  // is drawn from its own stream seeded by (seed, key), so a tensor does not depend on
  // which other tensors exist or their order.
  static Weights random(const std::vector<Parameter> &parameters, uint64_t seed);

  // safetensors (F32, BF16 or F16 tensors, widened to fp32; see runtime/Safetensors.h
  // for what is checked). The file is mapped, not read: with `parameters`, only their
  // tensors are decoded, after every missing or mis-shaped one has been named. Throws
  // tlc::Error on a malformed file, a non-finite weight, or copies that exceed memory.
  static Weights loadSafetensors(const std::string &path);
  static Weights loadSafetensors(const std::string &path, const std::vector<Parameter> &parameters);
  void saveSafetensors(const std::string &path, DType dtype = DType::F32) const;

  // Throws tlc::Error naming every missing or mis-shaped parameter.
  void checkAgainst(const std::vector<Parameter> &parameters, const std::string &origin) const;

  const Tensor &at(const std::string &key) const;  // throws tlc::Error when missing

  // The data of a Program's Weight value: its keys' tensors concatenated along dim 0
  // (one key, or several after QKV merge / gate-up merge). Throws tlc::Error, naming
  // `backend`, when they do not add up to the value's shape.
  std::vector<float> concatenated(const Value &value, const std::string &backend) const;
  bool contains(const std::string &key) const { return tensors_.count(key) != 0; }
  void set(const std::string &key, Tensor tensor) { tensors_[key] = std::move(tensor); }
  const std::map<std::string, Tensor> &all() const { return tensors_; }

private:
  // Throws tlc::Error listing every parameter `shapeOf` does not have or has another shape for.
  static void checkShapes(
      const std::vector<Parameter> &parameters, const std::string &origin,
      const std::function<const std::vector<int64_t> *(const std::string &key)> &shapeOf);

  std::map<std::string, Tensor> tensors_;
};

} // namespace tlc
