// A chain of two matrix-vector GEMMs as one kernel (tl-fuse-gemv-chains, gemv_chain.cuh):
// the producer's Spec, whose tiles are a block's BI columns in each of its bands and whose
// epilogue's one value is the hook `produce` (kept on chip, stored nowhere); the reader's,
// one tile of all its columns with its epilogue as any GEMM's; the entry; the launch.
#include "compiler/codegen/GemmSource.h"

#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tlc::codegen {
using namespace gemm;
namespace {

// The producer's epilogue value (h) for columns c0 .. c0 + 7 of row m into `out`, read from
// the accumulator as the epilogue hook reads it (v: the first band's chunk; row: the tile).
std::string produceHook(const GemmSpec &producer, ElementCode &code) {
  const GemmGroup &group = producer.groups[0];
  ChunkLoop loop{"c", "c0", 8, group.width, {{"m", {0}}, {"bt", {0}}}, epilogueAccumulator(group, false)};
  return fmt::format("  static constexpr int BANDS = {};\n", group.bands.size()) +
         "  TL_DEVICE static void produce(const Params &p, const tl_tile_cols &t, int bt, int m, int lc, const float (&v)[8],\n"
         "                                const float *row, float (&out)[8]) {\n"
         "    (void)p; (void)bt; (void)m; (void)row; (void)v;\n"
         "    const int c0 = t.col0 + lc;\n    (void)c0;\n" +
         code.values(group.stores[0].value, "out", loop, "    ") + "  }\n};\n";
}

std::vector<std::string> chainHeader(const KernelSource &source, const GemmSpec &producer, const GemmPlan &producerPlan,
                                     const GemmSpec &reader, const GemvChainTile &tile,
                                     const std::vector<std::string> &readerEpilogue) {
  const GemmGroup &group = producer.groups[0];
  std::vector<std::string> bands;
  for (int64_t start : group.bands) bands.push_back(fmt::format("{}..{}", start, start + group.width - 1));
  std::vector<std::string> lines = {
      fmt::format("producer GEMM M {} x N {} x K {}: acc = A · {}ᵀ in fp32, A = {}", producer.M, producer.N, producer.K,
                  source.name(producer.b), describeOperandA(source, producer, producerPlan)),
      fmt::format("producer epilogue, accumulator columns {}: h = {}, kept in shared memory in fp32 (never stored)",
                  fmt::join(bands, " with "), describe(group.stores[0].value, source.names(), describeAccumulator(group))),
      fmt::format("reader GEMM M {} x N {} x K {}: acc = h · {}ᵀ, each block its K slice of {} (its own columns of h), "
                  "its sums added into the sync words as 64-bit fixed point (the same on every run); the last "
                  "block to arrive runs the epilogue",
                  reader.M, reader.N, reader.K, source.name(reader.b), tile.BI)};
  lines.insert(lines.end(), readerEpilogue.begin(), readerEpilogue.end());
  lines.push_back(fmt::format("every target: gemv_chain.cuh, {} blocks of {} warps, each {} columns of h in {} band{}, "
                              "fp32 FMAs on weights streamed with 16-byte loads",
                              group.width / tile.BI, tile.warps, tile.BI, group.bands.size(),
                              group.bands.size() == 1 ? "" : "s"));
  return lines;
}

} // namespace

EmittedKernel emitGemvChain(const KernelSource &source, const GemmSpec &reader) {
  const GemmSpec &producer = *reader.producer;
  const GemmGroup &group = producer.groups.at(0);
  if (reader.K != group.width || reader.groups.size() != 1 || reader.M != producer.M || producer.batch != 1 ||
      reader.batch != 1 || reader.bKN || reader.normGrad)
    throw Error(fmt::format("code generation: kernel '{}': a GEMM chain's reader must take all of its producer's one "
                            "group as its K, one group of columns, B stored [N, K]",
                            source.entry()));
  if (std::string why = whyNotGemvChain(producer.M, producer.K, group.width, int(group.bands.size()), reader.N); !why.empty())
    throw Error(fmt::format("code generation: kernel '{}': no GEMV chain: {}", source.entry(), why));
  const Machine &machine = source.machine();
  const GemvChainTile tile = chooseGemvChainTile(group.width, machine);
  const int BM = int(producer.M), BN = tile.BI * int(group.bands.size());

  GemmPlan producerPlan = planGemm(source, producer);
  if (!readsEightAlongK(producer, producerPlan))
    throw Error(fmt::format("code generation: kernel '{}': the GEMM in its prologue cannot read A and B 8 k at a time",
                            source.entry()));
  producerPlan.gemv = GemvTile{BM, BN, 1, tile.warps, false, {0}};
  GemmPlan readerPlan;
  readerPlan.bConstant = source.constantArgument(reader.b);
  readerPlan.gemv = GemvTile{BM, int(reader.N), 1, tile.warps, false, {0}};

  ElementCode code(source.entry(), source.names());
  const std::string entry = source.entry(), producerName = entry + "_producer", readerName = entry + "_reader";
  const ColumnMapping producerColumns = columnMapping(producer, false, {});
  const ColumnMapping readerColumns = columnMapping(reader, false, {});
  std::string spec = specConstants(source, producer, producerPlan, producerColumns, producerName) +
                     operandAHooks(source, producer, producerPlan, code) +
                     operandBHooks(source, producer, producerPlan, producerColumns) + produceHook(producer, code);
  EpilogueCode epilogue = epilogueHook(source, reader, false, {}, code);
  spec += specConstants(source, reader, readerPlan, readerColumns, readerName) +
          operandBHooks(source, reader, readerPlan, readerColumns) + epilogue.hook;

  std::string out = source.header("two matrix-vector GEMMs chained in one kernel",
                                  chainHeader(source, producer, producerPlan, reader, tile, epilogue.details));
  out += source.prelude({"gemv_chain.cuh"});
  out += code.globals();
  out += source.paramsStruct();
  out += spec;
  // Two blocks an SM at least: at one (168 registers a thread) the 1.1B's chain ran slower
  // (bench/RESULTS.md, 2026-12-04).
  out += fmt::format("#define {}_BOUNDS {} * TL_WARP, 2\n", entry, tile.warps);
  const std::string specs = fmt::format("{}<{}, {}, 1, {}, 1, 1, 1, 0>, {}<{}, {}, 1, {}, 1, 1, 1, 0>", producerName, BM,
                                        BN, tile.warps, readerName, BM, reader.N, tile.warps);
  out += source.entryPoint(entry + "_BOUNDS", fmt::format("  tl_gemv_chain<{}>(p);\n", specs), {}, "", "", "");

  EmittedKernel emitted;
  emitted.source = std::move(out);
  // Shared memory as gemv_chain.cuh lays it out: A's rows, the reader's sums, the
  // producer's tile, h, the rows' scales and the warps' sums of squares.
  const int64_t shared =
      gemvChainSharedBytes(BM, producer.K, reader.N, tile.BI, int(group.bands.size()), tile.warps);
  const int64_t blocks = group.width / tile.BI;
  emitted.launch["cuda"] = {blocks, tile.warps * 32, shared};
  emitted.launch["hip"] = {blocks, tile.warps * 64, shared};
  // The arrivals and the overflow flag, then (8-byte aligned: one word of slack) the
  // reader's sums as 64-bit fixed point.
  emitted.syncWords = 3 + 2 * BM * reader.N;
  return emitted;
}

} // namespace tlc::codegen
