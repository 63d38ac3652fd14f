#include "compiler/codegen/Tasks.h"

#include "compiler/codegen/Schedule.h"

#include <algorithm>

namespace tlc::codegen {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

using Ranges = std::map<std::string, std::pair<int64_t, int64_t>>;

// Sorted, overlapping and touching ranges joined.
std::vector<std::pair<int64_t, int64_t>> merged(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto &range : ranges) {
    if (!out.empty() && range.first <= out.back().second) out.back().second = std::max(out.back().second, range.second);
    else out.push_back(range);
  }
  return out;
}

void add(std::vector<ElementRange> &to, int param, const std::vector<std::pair<int64_t, int64_t>> &ranges) {
  for (const auto &[begin, end] : ranges) to.push_back({param, begin, end});
}

// Every load of an input in `value`, over `ranges`, as reads.
void addLoads(std::vector<ElementRange> &reads, const ElementRef &value, const Ranges &ranges) {
  for (const ElementExpr *load : leaves(value, ElementExpr::Kind::Load))
    add(reads, load->param, rangesOver(load->offset, ranges));
}

} // namespace

std::pair<int64_t, int64_t> boundsOver(const IndexExpr &offset, const Ranges &ranges) {
  IndexExpr at = offset;
  for (const auto &[name, range] : ranges)
    if (at.uses(name)) at = at.substitute(name, IndexExpr(range.first) + IndexExpr::variable(name, range.second - range.first + 1));
  return {at.minValue(), at.maxValue()};
}

std::vector<std::pair<int64_t, int64_t>> rangesOver(const IndexExpr &offset, const Ranges &ranges, int64_t width) {
  // Each variable's range cut where its period repeats (at most a bounded number of
  // pieces in all: beyond it, whole ranges, a superset).
  std::vector<Ranges> pieces(1);
  for (const auto &[name, range] : ranges) {
    int64_t period = offset.uses(name) ? offset.period(name) : 1;
    std::vector<std::pair<int64_t, int64_t>> cuts;
    if (period <= 1 || range.second - range.first + 1 <= 1 ||
        int64_t(pieces.size()) * ceilDiv(range.second - range.first + 1, period) > 4096) {
      cuts.push_back(range);
    } else {
      for (int64_t first = range.first; first <= range.second;) {
        int64_t last = std::min(range.second, (first / period + 1) * period - 1);
        cuts.push_back({first, last});
        first = last + 1;
      }
    }
    std::vector<Ranges> more;
    for (const Ranges &piece : pieces)
      for (const auto &cut : cuts) {
        Ranges extended = piece;
        extended[name] = cut;
        more.push_back(extended);
      }
    pieces = std::move(more);
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Ranges &piece : pieces) {
    auto [low, high] = boundsOver(offset, piece);
    out.push_back({low, high + width});
  }
  return merged(out);
}

BlockAccess gemmBlockAccess(const GemmSpec &gemm, const GemmTileShape &tile, int64_t block) {
  const int64_t tilesM = ceilDiv(gemm.M, tile.BM);
  int64_t tilesN = 0;
  if (tile.flat) tilesN = ceilDiv(gemm.N, tile.BN);
  else
    for (const GemmGroup &group : gemm.groups) tilesN += ceilDiv(group.width, tile.BN / int64_t(group.bands.size()));
  const int64_t tm = block % tilesM, tn = (block / tilesM) % tilesN, bt = block / (tilesM * tilesN);
  const std::pair<int64_t, int64_t> rows{tm * tile.BM, std::min(gemm.M, (tm + 1) * tile.BM) - 1};
  BlockAccess access;
  Ranges operand{{"m", rows}, {"k", {0, gemm.K - 1}}, {"bt", {bt, bt}}};
  if (gemm.aValue) addLoads(access.reads, gemm.aValue, operand);
  else add(access.reads, gemm.a, rangesOver(gemm.aOffset, operand));
  add(access.reads, gemm.b, rangesOver(gemm.bOffset, {{"n", {0, gemm.N - 1}}, {"k", {0, gemm.K - 1}}, {"bt", {bt, bt}}}));
  if (gemm.gain >= 0) add(access.reads, gemm.gain, {{0, gemm.K}});
  // The tile's columns of each group (group-local c), then each store's reads and writes.
  int64_t first = tn;
  for (size_t g = 0; g < gemm.groups.size(); ++g) {
    const GemmGroup &group = gemm.groups[g];
    const int64_t pair = g < tile.pairs.size() ? tile.pairs[g] : 0;
    std::vector<std::pair<int64_t, int64_t>> runs;
    if (tile.flat) {
      int64_t begin = std::max(tn * tile.BN, group.bands[0]), end = std::min((tn + 1) * tile.BN, group.bands[0] + group.width);
      if (begin < end) runs.push_back({begin - group.bands[0], end - 1 - group.bands[0]});
    } else {
      int64_t width = tile.BN / int64_t(group.bands.size()), tiles = ceilDiv(group.width, width);
      if (first >= 0 && first < tiles && pair == 0) {
        runs.push_back({first * width, std::min(group.width, (first + 1) * width) - 1});
      } else if (first >= 0 && first < tiles) {  // two runs of width / 2, `pair` apart (tl_tile_column)
        const int64_t half = width / 2, start = pairedTileStart(first, width, pair);
        runs.push_back({start, start + half - 1});
        runs.push_back({start + pair, start + pair + half - 1});
      }
      first -= tiles;
    }
    for (const auto &columns : runs) {
      Ranges epilogue{{"m", rows}, {"c", columns}, {"bt", {bt, bt}}};
      for (const Store &store : group.stores) {
        addLoads(access.reads, store.value, epilogue);
        add(access.writes, store.param, rangesOver(store.offset, epilogue));
      }
    }
  }
  return access;
}

BlockAccess attentionBlockAccess(const AttentionSpec &spec, int queries, int heads, int64_t block) {
  const int64_t group = spec.H / spec.HKV, groups = group / heads, tilesQ = ceilDiv(spec.SQ, queries);
  const int64_t qt = tilesQ - 1 - block / (spec.B * spec.HKV * groups);
  int64_t rest = block % (spec.B * spec.HKV * groups);
  const int64_t hg = rest % groups;
  rest /= groups;
  const int64_t hkv = rest % spec.HKV, b = rest / spec.HKV, h0 = hkv * group + hg * heads;
  const std::pair<int64_t, int64_t> rows{qt * queries, std::min(spec.SQ, (qt + 1) * queries) - 1};
  const int64_t keys = spec.causal ? std::min(spec.SK, rows.second + (spec.SK - spec.SQ) + 1) : spec.SK;
  BlockAccess access;
  Ranges own{{"b", {b, b}}, {"h", {h0, h0 + heads - 1}}, {"s", rows}};
  add(access.reads, spec.q, rangesOver(spec.qRow, own, spec.D));
  if (keys > 0) {
    Ranges seen{{"b", {b, b}}, {"h", {hkv, hkv}}, {"s", {0, keys - 1}}};
    add(access.reads, spec.k, rangesOver(spec.kRow, seen, spec.D));
    add(access.reads, spec.v, rangesOver(spec.vRow, seen, spec.DV));
  }
  add(access.writes, spec.out, rangesOver(spec.outRow, own, spec.DV));
  if (spec.lse >= 0) {
    IndexExpr row = (IndexExpr::variable("b", spec.B) * spec.H + IndexExpr::variable("h", spec.H)) * spec.SQ +
                    IndexExpr::variable("s", spec.SQ);
    add(access.writes, spec.lse, rangesOver(row, own));
  }
  return access;
}

BlockAccess attentionRowBlockAccess(const AttentionSpec &spec, int64_t block) {
  const int64_t s = block % spec.SQ, h = (block / spec.SQ) % spec.H, b = block / (spec.SQ * spec.H);
  const int64_t keys = spec.causal ? std::min(spec.SK, s + (spec.SK - spec.SQ) + 1) : spec.SK;
  BlockAccess access;
  Ranges own{{"b", {b, b}}, {"h", {h, h}}, {"s", {s, s}}};
  add(access.reads, spec.q, rangesOver(spec.qRow, own, spec.D));
  if (keys > 0) {
    Ranges seen{{"b", {b, b}}, {"h", {h / (spec.H / spec.HKV), h / (spec.H / spec.HKV)}}, {"s", {0, keys - 1}}};
    add(access.reads, spec.k, rangesOver(spec.kRow, seen, spec.D));
    add(access.reads, spec.v, rangesOver(spec.vRow, seen, spec.DV));
  }
  add(access.writes, spec.out, rangesOver(spec.outRow, own, spec.DV));
  if (spec.lse >= 0) add(access.writes, spec.lse, {{(b * spec.H + h) * spec.SQ + s, (b * spec.H + h) * spec.SQ + s + 1}});
  return access;
}

BlockAccess rowBlockAccess(const RowSpec &spec, int64_t rowsPerBlock, int64_t grid, int64_t block) {
  BlockAccess access;
  const int64_t rows = spec.kind == RowSpec::Kind::CrossEntropy ? spec.batch * std::max<int64_t>(spec.seq - 1, 0)
                                                                : spec.rows;
  const int64_t first = block * rowsPerBlock, last = std::min(rows, first + rowsPerBlock);
  // The loss is the mean the last block to finish writes (NaN without predictions): each
  // block claims it.
  if (spec.kind == RowSpec::Kind::CrossEntropy) access.writes.push_back({spec.y, 0, 1});
  if (first >= last) return access;
  switch (spec.kind) {
  case RowSpec::Kind::RmsNorm:
  case RowSpec::Kind::Softmax:
    access.reads.push_back({spec.x, first * spec.cols, last * spec.cols});
    if (spec.gain >= 0) access.reads.push_back({spec.gain, 0, spec.cols});
    access.writes.push_back({spec.y, first * spec.cols, last * spec.cols});
    break;
  case RowSpec::Kind::Embedding:
    access.reads.push_back({spec.ids, first, last});
    access.reads.push_back({spec.x, 0, kWholeValue});  // the table
    access.writes.push_back({spec.y, first * spec.cols, last * spec.cols});
    break;
  case RowSpec::Kind::CrossEntropy:
    // Prediction r reads logits row (b, s) of r = b (SEQ - 1) + s and the next token's id;
    // the loss is the mean the last block to finish writes, so each block claims it.
    for (int64_t r = first; r < rows; r += grid) {
      int64_t b = r / (spec.seq - 1), s = r % (spec.seq - 1);
      access.reads.push_back({spec.x, (b * spec.seq + s) * spec.cols, (b * spec.seq + s + 1) * spec.cols});
      access.reads.push_back({spec.ids, b * spec.seq + s + 1, b * spec.seq + s + 2});
    }
    break;
  default: break;
  }
  return access;
}

BlockAccess elementwiseBlockAccess(const ElementwiseSpec &spec, int64_t perBlock, int64_t block) {
  BlockAccess access;
  const int64_t first = block * perBlock, last = std::min(spec.count, first + perBlock) - 1;
  if (first > last) return access;
  for (const Store &store : spec.stores) {
    int64_t end = store.limit >= 0 ? std::min(last, store.limit - 1) : last;
    if (end < first) continue;
    Ranges elements{{"e", {first, end}}};
    addLoads(access.reads, store.value, elements);
    add(access.writes, store.param, rangesOver(store.offset, elements));
  }
  return access;
}

} // namespace tlc::codegen
