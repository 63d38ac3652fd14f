// Elementwise kernels (elementwise.cuh): the stand-alone ops of O0 and O1.
#include "compiler/codegen/EmitterSupport.h"

#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

namespace tlc::codegen {

EmittedKernel emitElementwise(const KernelSource &source, const ElementwiseSpec &spec) {
  const std::string &entry = source.entry();
  // Stores of smaller results (pieces of a split) are computed only where e is inside
  // them, loads included: each size's stores under their own guard.
  std::map<int64_t, std::vector<Store>> byLimit;
  for (const Store &store : spec.stores) byLimit[store.limit >= 0 ? store.limit : spec.count].push_back(store);
  int vec = spec.count % 8 == 0 ? 8 : 1;
  for (const auto &[limit, stores] : byLimit)
    if (limit % 8 != 0) vec = 1;
  ElementCode code(entry, source.names());
  ChunkLoop loop{"e", "e0", vec, spec.count, {}, {}};
  loop.accumulator = [&](const ElementExpr &, const std::string &) -> std::string {
    throw Error(fmt::format("code generation: kernel '{}': an elementwise kernel has no accumulator", entry));
  };
  std::string body;
  for (const auto &[limit, stores] : byLimit) {
    if (limit == spec.count) {
      body += code.chunk(stores, loop, "    ");
      continue;
    }
    ChunkLoop piece = loop;
    piece.extent = limit;
    body += fmt::format("    if (e0 < {}) {{\n", limit) + code.chunk(stores, piece, "      ") + "    }\n";
  }
  std::vector<std::string> stores;
  for (const Store &store : spec.stores)
    stores.push_back(fmt::format("{} = {}", source.name(store.param), describe(store.value, source.names())));

  std::string out = source.header(fmt::format("{} elements, {} per step", spec.count, vec), {fmt::format("{}", fmt::join(stores, "; "))});
  out += source.prelude({"elementwise.cuh"});
  out += code.globals();
  out += source.paramsStruct();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n  static constexpr tl_i64 COUNT = {};\n"
                     "  static constexpr int VEC = {};\n  TL_DEVICE static void compute(const Params &p, tl_i64 e0) {{\n",
                     entry, entry, spec.count, vec);
  out += body + "  }\n};\n";
  out += source.entryPoint("256", fmt::format("  tl_elementwise<{}_spec>(p);\n", entry));
  EmittedKernel emitted;
  emitted.source = std::move(out);
  int64_t steps = (spec.count + vec - 1) / vec;
  emitted.launch["cuda"] = emitted.launch["hip"] = {std::max<int64_t>(1, std::min<int64_t>((steps + 255) / 256, 4096)), 256, 0};
  // As tasks of a persistent kernel, where one pass of the grid covers the output.
  const KernelLaunch &launch = emitted.launch.at("cuda");
  if (launch.gridBlocks * 256 >= steps)
    emitted.tasks = {launch.gridBlocks, 256, 0,
                     [spec, vec](int64_t block) { return elementwiseBlockAccess(spec, 256 * int64_t(vec), block); }};
  return emitted;
}

} // namespace tlc::codegen
