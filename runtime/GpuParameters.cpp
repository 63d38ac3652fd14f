#include "runtime/GpuParameters.h"

#include "runtime/Error.h"
#include "runtime/OpKind.h"
#include "runtime/Tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tlc {
namespace {

// optimizer.cuh's tl_optimizer_tensor and tl_optimizer_state, byte for byte.
struct OptimizerTensor {
  float *weight, *firstMoment, *secondMoment;
  void *copies[2];
  int32_t copyKinds[2];  // 0: f32, 1: bf16, 2: f32 rounded to bf16
};
static_assert(sizeof(OptimizerTensor) == 48, "the layout optimizer.cuh reads");
struct OptimizerHeader {
  int64_t step, reserved;
};

} // namespace

GpuParameters::GpuParameters(GpuDevice &device, const Program &program, const Weights &weights)
    : device_(device), program_(program) {
  for (const Parameter &parameter : program.parameters) {
    offsets_[parameter.key] = elements_;
    counts_[parameter.key] = Tensor::elementsOf(parameter.shape);
    elements_ += counts_[parameter.key];
  }
  storage_ = static_cast<char *>(device_.allocate(size_t(std::max<int64_t>(3 * elements_ * 4, 1))));
  for (const Parameter &parameter : program.parameters) {
    float *master = reinterpret_cast<float *>(storage_) + offsets_[parameter.key];
    masters_[parameter.key] = master;
    const Tensor &tensor = weights.at(parameter.key);
    device_.copyToDevice(master, tensor.data.data(), tensor.data.size() * 4);
  }
  device_.fill(storage_ + elements_ * 4, 0, size_t(2 * elements_ * 4));
}

GpuParameters::~GpuParameters() {
  try {
    device_.release(storage_);
    for (char *table : tables_) device_.release(table);
  } catch (...) {  // a destructor must not throw: the driver may already be gone
  }
}

void *GpuParameters::buildTable(const Kernel &optimizer, const std::map<int, void *> &weightPointer) {
  std::vector<OptimizerTensor> tensors;
  for (const OpRecord &op : optimizer.ops) {
    if (op.kind == OpKind::concat_grad) continue;  // a merged gradient's pieces, which the updates read in place
    if (op.kind != OpKind::adamw)
      throw Error(fmt::format("gpu backend: kernel '{}' mixes '{}' with the updates", optimizer.name,
                              opKindName(op.kind)));
    const std::string &key = op.stringAttr("key");
    auto found = offsets_.find(key);
    if (found == offsets_.end()) throw Error(fmt::format("gpu backend: the update of '{}' names no parameter", key));
    float *base = reinterpret_cast<float *>(storage_);
    OptimizerTensor tensor{base + found->second, base + elements_ + found->second, base + 2 * elements_ + found->second,
                           {nullptr, nullptr}, {0, 0}};
    // Every buffer the forward reads this parameter from, other than the master itself.
    std::vector<std::pair<char *, int32_t>> copies;
    for (const Value &value : program_.values) {
      if (value.storage != Storage::Weight) continue;
      int64_t offset = 0;
      bool holds = false;
      for (const std::string &part : value.weightKeys) {
        if (part == key) {
          holds = true;
          break;
        }
        offset += counts_.at(part);
      }
      if (!holds) continue;
      char *buffer = static_cast<char *>(weightPointer.at(value.id));
      if (buffer == reinterpret_cast<char *>(tensor.weight)) continue;
      int32_t kind = value.dtype == DType::BF16 ? 1 : program_.dtype == DType::BF16 ? 2 : 0;
      std::pair<char *, int32_t> copy{buffer + offset * dtypeBytes(value.dtype), kind};
      if (std::find(copies.begin(), copies.end(), copy) == copies.end()) copies.push_back(copy);
    }
    if (copies.size() > 2)
      throw Error(fmt::format("gpu backend: parameter '{}' is read from {} weight buffers; the optimizer writes at most 2",
                              key, copies.size()));
    for (size_t c = 0; c < copies.size(); ++c) {
      tensor.copies[c] = copies[c].first;
      tensor.copyKinds[c] = copies[c].second;
    }
    tensors.push_back(tensor);
  }
  std::vector<char> bytes(sizeof(OptimizerHeader) + tensors.size() * sizeof(OptimizerTensor), 0);
  std::memcpy(bytes.data() + sizeof(OptimizerHeader), tensors.data(), tensors.size() * sizeof(OptimizerTensor));
  tables_.push_back(static_cast<char *>(device_.allocate(bytes.size())));
  device_.copyToDevice(tables_.back(), bytes.data(), bytes.size());
  return tables_.back();
}

void GpuParameters::setStep(int64_t step) {
  OptimizerHeader header{step, 0};
  for (char *table : tables_) device_.copyToDevice(table, &header, sizeof(header));
}

Weights GpuParameters::download() const {
  device_.synchronize();
  Weights weights;
  for (const Parameter &parameter : program_.parameters) {
    Tensor tensor(parameter.shape);
    device_.copyToHost(tensor.data.data(), masters_.at(parameter.key), tensor.data.size() * 4);
    weights.set(parameter.key, std::move(tensor));
  }
  return weights;
}

} // namespace tlc
