// Weights: seeded random init, lookup, and the check against a model's parameters.
#include "runtime/Weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/MemoryBudget.h"
#include "runtime/ParameterShapes.h"
#include "runtime/LargeBuffer.h"
#include "runtime/RandomNormal.h"
#include "runtime/ThreadPool.h"

namespace tlc {
namespace {

uint64_t fnv1a64(const std::string &text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// splitmix64's finalizer: nearby (seed, key) pairs get unrelated stream seeds.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

} // namespace

Weights::Weights(const Weights &other) {
  std::lock_guard<std::mutex> lock(other.mutex_);
  tensors_ = other.tensors_;
  pending_ = other.pending_;
  threads_ = other.threads_;
}

Weights &Weights::operator=(const Weights &other) {
  if (this != &other) {
    std::scoped_lock lock(mutex_, other.mutex_);
    tensors_ = other.tensors_;
    pending_ = other.pending_;
    threads_ = other.threads_;
  }
  return *this;
}

Weights::Weights(Weights &&other) noexcept
    : tensors_(std::move(other.tensors_)), pending_(std::move(other.pending_)), threads_(other.threads_) {}

Weights &Weights::operator=(Weights &&other) noexcept {
  tensors_ = std::move(other.tensors_);
  pending_ = std::move(other.pending_);
  threads_ = other.threads_;
  return *this;
}

Weights Weights::random(const std::vector<Parameter> &parameters, uint64_t seed, int threads) {
  Weights weights;
  weights.threads_ = threads;
  for (const Parameter &parameter : parameters) {
    if (parameter.init != "normal" && parameter.init != "ones" && parameter.init != "zeros")
      throw Error(fmt::format("parameter '{}' has unknown init '{}' (expected normal, ones or zeros)", parameter.key,
                              parameter.init));
    Tensor::elementsOf(parameter.shape);  // throws on a negative dimension, now rather than when drawn
    weights.tensors_.erase(parameter.key);
    weights.pending_[parameter.key] = {parameter.shape, parameter.init, mix64(fnv1a64(parameter.key) ^ mix64(seed))};
  }
  return weights;
}

void Weights::fill(const Pending &pending, float *data, size_t count) const {
  if (pending.init == "normal") {
    ThreadPool pool(threads_);
    fillNormal(data, count, 0.02, pending.stream, &pool);
  } else {
    std::fill(data, data + count, pending.init == "ones" ? 1.0f : 0.0f);
  }
}

void Weights::drawPending() const {
  // All of them at once (to save them, or for a caller that wants every tensor): checked
  // against memory first, as a Program's parameters can be of any size.
  int64_t elements = 0;
  for (const auto &[key, pending] : pending_)
    elements = checkedAdd(elements, Tensor::elementsOf(pending.shape)).value_or(std::numeric_limits<int64_t>::max());
  MemoryBudget("random weights").need(fmt::format("{} tensors drawn as f32", pending_.size()), elements, 4).check();
  for (auto &[key, pending] : pending_) {
    Tensor tensor(pending.shape);
    fill(pending, tensor.data.data(), tensor.data.size());
    tensors_[key] = std::move(tensor);
  }
  pending_.clear();
}

bool Weights::contains(const std::string &key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tensors_.count(key) != 0 || pending_.count(key) != 0;
}

void Weights::set(const std::string &key, Tensor tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.erase(key);
  tensors_[key] = std::move(tensor);
}

const std::map<std::string, Tensor> &Weights::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  drawPending();
  return tensors_;
}

const Tensor &Weights::at(const std::string &key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return drawn(key);
}

const Tensor &Weights::drawn(const std::string &key) const {
  if (auto pending = pending_.find(key); pending != pending_.end()) {
    Tensor tensor(pending->second.shape);
    fill(pending->second, tensor.data.data(), tensor.data.size());
    pending_.erase(pending);
    return tensors_[key] = std::move(tensor);
  }
  auto found = tensors_.find(key);
  if (found == tensors_.end()) throw Error(fmt::format("missing weight '{}'", key));
  return found->second;
}

void Weights::checkAgainst(const std::vector<Parameter> &parameters,
                           const std::string &origin) const {
  std::lock_guard<std::mutex> lock(mutex_);
  checkParameterShapes(parameters, origin, [&](const std::string &key) -> const std::vector<int64_t> * {
    if (auto found = tensors_.find(key); found != tensors_.end()) return &found->second.shape;
    if (auto pending = pending_.find(key); pending != pending_.end()) return &pending->second.shape;
    return nullptr;
  });
}

std::vector<float> Weights::concatenated(const Value &value, const std::string &backend) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Element counts first, so a mismatch is reported before anything is drawn.
  std::vector<size_t> counts;
  size_t total = 0;
  for (const std::string &key : value.weightKeys) {
    int64_t count = 0;
    if (auto found = tensors_.find(key); found != tensors_.end()) count = found->second.numElements();
    else if (auto pending = pending_.find(key); pending != pending_.end()) count = Tensor::elementsOf(pending->second.shape);
    else throw Error(fmt::format("missing weight '{}'", key));
    counts.push_back(size_t(count));
    total += size_t(count);
  }
  if (int64_t(total) != value.numElements())
    throw Error(fmt::format("{} backend: weight '{}' needs {} elements ({}) but its keys hold {}", backend,
                            value.name, value.numElements(), shapeString(value.shape), total));
  std::vector<float> data;
  resizeLarge(data, total);
  float *out = data.data();
  for (size_t i = 0; i < value.weightKeys.size(); ++i) {
    const std::string &key = value.weightKeys[i];
    // A pending tensor is drawn straight into place and stays pending: one copy, not two.
    if (auto pending = pending_.find(key); pending != pending_.end()) fill(pending->second, out, counts[i]);
    else std::copy(tensors_.at(key).data.begin(), tensors_.at(key).data.end(), out);
    out += counts[i];
  }
  if (!value.columnScaleKey.empty()) {
    const std::vector<float> &scale = drawn(value.columnScaleKey).data;
    const size_t columns = value.shape.empty() ? 0 : size_t(value.shape.back());
    if (scale.size() != columns)
      throw Error(fmt::format("{} backend: weight '{}' has {} columns but its column scale '{}' has {} elements",
                              backend, value.name, columns, value.columnScaleKey, scale.size()));
    for (size_t e = 0; e < total; ++e) data[e] *= scale[e % columns];
  }
  return data;
}

} // namespace tlc
