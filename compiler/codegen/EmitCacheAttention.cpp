// Decode attention over generation's KV cache: a Spec for cache_attention.cuh, with the
// split of the cache that lets one sequence fill the GPU (flash-decoding).
#include "compiler/codegen/EmitterSupport.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>

namespace tlc::codegen {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of the kernel an SM runs at once, where shared memory allows: what the split rule
// fills the GPU with (of two, four and eight, the fastest where measured:
// docs/generation.md), and on NVIDIA the launch bounds that keep the registers within
// what the shared memory allows (v2 at 136 registers ran three an SM, 7 % slower a
// batch-8 decode step).
constexpr int64_t kBlocksPerSM = 4;

// v2's shared memory with tiles of `keys` keys: the query rows, a tile of keys (rows
// padded as cache_attention.cuh pads them) and of values in fp32, the tile's scores, the
// output rows and three floats a row.
int64_t fmaKeyRow(const CacheAttentionSpec &spec) { return spec.D % 4 == 0 ? spec.D + 4 : spec.D + 1; }
int64_t fmaSharedBytes(const CacheAttentionSpec &spec, int64_t rows, int64_t keys) {
  return (rows * spec.D + keys * fmaKeyRow(spec) + keys * spec.DV + rows * keys + rows * spec.DV + 3 * rows) * 4;
}

// v3's (tl_cache_mma_layout): Q's 16 rows and two stages of 64 keys and values in bf16,
// then the four warps' row maxima and sums, the merged rows and their maxima and sums.
int64_t mmaStageBytes(const CacheAttentionSpec &spec) { return 2 * 64 * (spec.D + spec.DV) * 2; }
int64_t mmaSharedBytes(const CacheAttentionSpec &spec, int64_t rows) {
  return 16 * spec.D * 2 + mmaStageBytes(spec) + 2 * 4 * 16 * 4 + rows * spec.DV * 4 + 2 * 16 * 4;
}

// Keys a tile: as many as keep v2's shared memory within 40 KiB, 8 to 64.
int64_t keysPerTile(const CacheAttentionSpec &spec, int64_t rows) {
  for (int64_t keys = 64; keys >= 8; keys /= 2)
    if (fmaSharedBytes(spec, rows, keys) <= (40 << 10)) return keys;
  return 0;
}

} // namespace

EmittedKernel emitCacheAttention(const KernelSource &source, const CacheAttentionSpec &spec) {
  const std::string &entry = source.entry();
  if (spec.HKV < 1 || spec.H % spec.HKV)
    throw Error(fmt::format("code generation: kernel '{}': {} query heads are not a multiple of {} kv heads", entry,
                            spec.H, spec.HKV));
  const int64_t group = spec.H / spec.HKV, rows = group * spec.SQ, tile = keysPerTile(spec, rows);
  if (tile == 0)
    throw Error(fmt::format("code generation: kernel '{}': {} query rows a kv head of head size {} do not fit a "
                            "block's shared memory",
                            entry, rows, spec.D));
  // cache_attention.cuh v3 (tensor cores) where NVIDIA compiles the kernel: bf16 caches,
  // head sizes a multiple of 64, the kv head's query rows one m16 tile.
  const Machine &machine = source.machine();
  const bool mma = source.dtype(spec.keys) == DType::BF16 && spec.D % 64 == 0 && spec.DV % 64 == 0 && rows <= 16 &&
                   !machine.overrides.cacheAttentionFma;
  const int64_t sharedBytes = mma ? mmaSharedBytes(spec, rows) : fmaSharedBytes(spec, rows, tile);
  // As many splits as the sequences' kv heads fit in the blocks an SM runs at once (at most
  // kBlocksPerSM), each at least a tile of keys: no second wave.
  const int64_t resident = std::clamp<int64_t>(blocksBySharedMemory(machine, sharedBytes), 1, kBlocksPerSM);
  const int64_t heads = spec.B * spec.HKV;
  // A split's keys at least: one tile, or the override's whole tiles.
  const int64_t splitKeys = std::max<int64_t>(tile, ceilDiv(machine.overrides.cacheAttentionSplitKeys, tile) * tile);
  // The combine's weights (rows x splits floats) live in the key tiles' shared memory.
  const int64_t combineFloats = mma ? mmaStageBytes(spec) / 4 : tile * fmaKeyRow(spec);
  const int64_t splits = std::clamp<int64_t>(std::min(resident * machine.multiprocessors / heads, combineFloats / rows),
                                             1, ceilDiv(spec.context, splitKeys));
  const int vec = spec.D % 8 == 0 && spec.DV % 8 == 0 ? 8 : 1;
  const std::vector<int64_t> cache{spec.layers, spec.B, spec.HKV, spec.context, spec.D};

  auto cacheRow = [&](int param, const char *name, int64_t width) {
    IndexExpr b = IndexExpr::variable("b", spec.B), h = IndexExpr::variable("h", spec.HKV),
              t = IndexExpr::variable("s", spec.context);
    std::vector<int64_t> shape = cache;
    shape.back() = width;
    return fmt::format("  TL_DEVICE static const {} *{}(const Params &p, int b, int h, int s) {{ return p.{} + ({}); }}\n",
                       source.type(param), name, source.name(param),
                       indexCode(linearize({IndexExpr(spec.layer), b, h, t, IndexExpr(0)}, shape)));
  };
  auto queryRow = [&](int param, const char *name, const IndexExpr &offset) {
    return fmt::format("  TL_DEVICE static {}{} *{}(const Params &p, int b, int h, int s) {{ return p.{} + ({}); }}\n",
                       param == spec.out ? "" : "const ", source.type(param), name, source.name(param), indexCode(offset));
  };

  std::string out = source.header(
      "decode attention over the KV cache (flash-decoding): softmax(q kᵀ · scale) v over each query's cache rows "
      "0..its position",
      {fmt::format("q {} = [{}, {}, {}, {}] at positions {}[b] + s; caches {}, {} = [{}, {}, {}, {}, {}], layer {}",
                   source.name(spec.q), spec.B, spec.H, spec.SQ, spec.D, source.name(spec.positions),
                   source.name(spec.keys), source.name(spec.values), spec.layers, spec.B, spec.HKV, spec.context,
                   spec.D, spec.layer),
       fmt::format("a block per (sequence, kv head, split): the {} query heads of a kv head x {} rows share each tile "
                   "of {} keys; up to {} splits of at least {} keys a sequence, combined by the last to finish; {}",
                   group, spec.SQ, tile, splits, splitKeys,
                   mma ? "products on tensor cores where NVIDIA compiles it (v3), else fp32 FMAs (v2)" : "fp32 FMAs (v2)"),
       fmt::format("scale {}", spec.scale)});
  out += source.prelude({"cache_attention.cuh"});
  out += source.paramsStruct();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr int B = {}, H = {}, HKV = {}, SQ = {}, D = {}, DV = {}, T = {};\n", spec.B,
                     spec.H, spec.HKV, spec.SQ, spec.D, spec.DV, spec.context);
  out += fmt::format("  static constexpr int SPLITS = {}, KT = {}, MIN_KEYS = {}, ONE_SPLIT_KEYS = {}, VEC = {};\n", splits,
                     tile, splitKeys, std::max(2 * tile, splitKeys), vec);
  out += fmt::format("  static constexpr bool MMA = {};\n", mma ? "true" : "false");
  out += fmt::format("  static constexpr float SCALE_LOG2 = {};\n", floatLiteral(spec.scale * 1.4426950408889634));
  out += queryRow(spec.q, "q_src", spec.qRow) + queryRow(spec.out, "out_dst", spec.outRow);
  out += cacheRow(spec.keys, "k_src", spec.D) + cacheRow(spec.values, "v_src", spec.DV);
  out += fmt::format("  TL_DEVICE static int position(const Params &p, int b) {{ return p.{}[b]; }}\n",
                     source.name(spec.positions));
  out += "};\n";
  if (mma)  // the dynamic shared memory asked for at launch is the layout's
    out += fmt::format("#if defined(TL_NVIDIA)\nstatic_assert(tl_cache_mma_layout<{}_spec>::BYTES == {}, \"v3's shared "
                       "memory\");\n#endif\n",
                       entry, sharedBytes);
  out += fmt::format("#if defined(TL_NVIDIA)\n#define {0}_BOUNDS 128, {1}\n#else\n#define {0}_BOUNDS 128\n#endif\n", entry,
                     resident);
  out += source.entryPoint(entry + "_BOUNDS", fmt::format("  tl_cache_attention<{}_spec>(p);\n", entry));

  EmittedKernel emitted;
  emitted.source = std::move(out);
  emitted.launch["cuda"] = {heads * splits, 128, mma ? sharedBytes : 0};
  emitted.launch["hip"] = {heads * splits, 128, 0};
  emitted.workspaceBytes = splits > 1 ? heads * splits * rows * (spec.DV + 1) * 4 : 0;
  emitted.syncWords = heads;
  return emitted;
}

} // namespace tlc::codegen
