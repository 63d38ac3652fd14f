// A training step's parameters on a GPU: each parameter's fp32 master weight and AdamW's
// two moments in device memory, and the table the optimizer kernel reads
// (compiler/codegen/templates/optimizer.cuh, tl_optimizer_state): the step, then per
// update, in the kernel's op order, the master and moments and where the forward reads
// the weight (a bf16 copy, a slice of a concatenated weight) so the kernel writes it
// there too.
#pragma once

#include "runtime/JitBackend.h"
#include "runtime/Program.h"
#include "runtime/Weights.h"

#include <map>
#include <vector>
#include <string>

namespace tlc {

class GpuParameters {
public:
  // Uploads the starting weights as the masters; moments start at zero.
  GpuParameters(GpuDevice &device, const Program &program, const Weights &weights);
  ~GpuParameters();
  GpuParameters(const GpuParameters &) = delete;
  GpuParameters &operator=(const GpuParameters &) = delete;

  float *master(const std::string &key) const { return masters_.at(key); }

  // The table for `optimizer` (a kernel of adamw ops); `weightPointer`: each Weight
  // value's buffer, by value id. Returns the table's device address, held until the
  // parameters are destroyed. Weight values the step reads from the masters
  // (MasterWeights.h) point at them already.
  void *buildTable(const Kernel &optimizer, const std::map<int, void *> &weightPointer);
  void setStep(int64_t step);  // every table's, before a step's launches

  Weights download() const;           // the masters, by checkpoint key
  int64_t momentBytes() const { return 2 * elements_ * 4; }

private:
  GpuDevice &device_;
  const Program &program_;
  char *storage_ = nullptr;  // masters, then first moments, then second moments
  int64_t elements_ = 0;
  std::map<std::string, float *> masters_;
  std::map<std::string, int64_t> offsets_;  // element offset of each parameter
  std::map<std::string, int64_t> counts_;   // and its elements
  std::vector<char *> tables_;               // one per optimizer kernel
};

} // namespace tlc
