// What the per-kind emitters (EmitGemm.cpp, EmitAttention.cpp, EmitRows.cpp,
// EmitElementwise.cpp) share: the kernel's arguments as C, its signature and a readable
// header comment.
#pragma once

#include "compiler/codegen/ElementCode.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/codegen/Schedule.h"

#include <functional>
#include <string>

namespace tlc::codegen {

// Tensor-core products per fp32 product at a matmul precision (mma_tf32.cuh): 3 (3xTF32),
// 1 (plain TF32), or 0 for fp32 FMAs.
inline int tf32Products(MatmulPrecision precision) {
  return precision == MatmulPrecision::High ? 3 : precision == MatmulPrecision::Medium ? 1 : 0;
}

class KernelSource {
public:
  KernelSource(const Program &program, const KernelSpec &spec, const Machine &machine);

  const std::string &entry() const { return spec_.entry; }
  const ParamNames &names() const { return names_; }
  const std::string &name(int param) const { return names_.names.at(size_t(param)); }
  const std::string &type(int param) const { return names_.types.at(size_t(param)); }
  DType dtype(int param) const { return spec_.params.at(size_t(param)).dtype; }
  const Value &value(int param) const { return program_.value(spec_.params.at(size_t(param)).value); }
  int valueId(int param) const { return spec_.params.at(size_t(param)).value; }
  // Whether a GEMM may read its weight as bf16 parts (KernelLaunch::bf16PartsInputs): in a
  // forward. A training step's optimizer writes the weights where the forward reads them,
  // in their own layout; a generator's prefill and decode share theirs, and the decode's
  // matrix-vector GEMMs read them plain (a second copy would double the weights).
  bool weightPartsAllowed() const { return program_.kind == ProgramKind::Forward; }
  // Whether no kernel of the program writes argument `param`: a weight (or a view of one)
  // outside a training step, whose optimizer updates the weights in place.
  bool constantArgument(int param) const;
  bool chained() const { return spec_.chained; }
  // What the NVIDIA launch shapes are chosen for, and the compile options' overrides.
  const Machine &machine() const { return machine_; }
  MatmulPrecision matmulPrecision() const { return program_.matmulPrecision; }

  // struct <entry>_params { const tl_bf16 *__restrict__ in0; ...; float *ws; unsigned *sync; };
  std::string paramsStruct() const;
  // The kernel's body as a device function, TL_DEVICE void <entry>_body(const <entry>_params
  // &p, extra...) { body }, and (unless TL_PERSISTENT, where a persistent kernel calls the
  // body per task) the entry point extern "C" __global__ void __launch_bounds__(threads)
  // <entry>(...) that calls it. `extra`: parameters after `sync` that are not Program values
  // (the optimizer's state); `attributes`: more of the kernel's attributes (a macro for its
  // cluster shape). In a persistent kernel, <entry>_prefetch(p, thread, threads) runs on
  // the worker's other threads while its first warp waits for the task's producers:
  // `prefetch` loads what does not depend on them (a GEMV's weights), or nothing. With a
  // weight ring (TL_RING), <entry>_produce(p, block, produced) is what the worker's producer
  // warp runs for each of its tasks: `produce` copies a GEMV's weights into the ring.
  std::string entryPoint(const std::string &threads, const std::string &body, const std::vector<std::string> &extra = {},
                         const std::string &attributes = "", const std::string &prefetch = "",
                         const std::string &produce = "") const;
  // The comment every kernel starts with: what it computes and its arguments.
  std::string header(const std::string &what, const std::vector<std::string> &details) const;
  // The vendor block and the named templates.
  std::string prelude(const std::vector<std::string> &templates) const;

private:
  const Program &program_;
  const KernelSpec &spec_;
  const Machine &machine_;
  ParamNames names_;
};

// A readable one-line form of an element expression: add(in2, acc). `accumulator` names
// an accumulator read (a GEMM epilogue's other bands); "acc" without it.
std::string describe(const ElementRef &expr, const ParamNames &names,
                     const std::function<std::string(const ElementExpr &)> &accumulator = {});

EmittedKernel emitGemm(const KernelSource &source, const GemmSpec &gemm);
// A GEMM whose A its producer computes in the same kernel (GemmSpec::producer).
EmittedKernel emitGemvChain(const KernelSource &source, const GemmSpec &reader);
bool gemmLaunchesApart(const KernelSource &source, const GemmSpec &gemm);
EmittedKernel emitAttention(const KernelSource &source, const AttentionSpec &attention);
EmittedKernel emitCacheAttention(const KernelSource &source, const CacheAttentionSpec &attention);
EmittedKernel emitRows(const KernelSource &source, const RowSpec &rows);
EmittedKernel emitElementwise(const KernelSource &source, const ElementwiseSpec &elementwise);
EmittedKernel emitAttentionGrad(const KernelSource &source, const AttentionGradSpec &attention);
EmittedKernel emitOptimizer(const KernelSource &source, const OptimizerSpec &optimizer);

} // namespace tlc::codegen
