#include "tools/ReportModel.h"

#include "runtime/OptLevels.h"
#include "tools/Graphviz.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

namespace tlc {
namespace {

// Kernel colours (ColorBrewer's Set3), reused round the wheel; level colours as the ladder's chart.
const char *kKernelColors[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                               "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};
const char *kLevelColors[] = {"#9aa5b1", "#5b8def", "#2fb380", "#f08c2e"};

using Place = std::pair<int, int>;

LevelModel buildLevel(const ReportData &data, const LevelRun &run, int level) {
  std::map<Place, int> nodeAt;
  for (size_t i = 0; i < data.ops.size(); ++i) nodeAt[{data.ops[i].line, data.ops[i].column}] = int(i);
  LevelModel model;
  model.level = level;
  const Program &program = run.program;
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    double ms = k < run.launchMs.size() ? run.launchMs[k] : -1;
    if (program.kernels[k].parts.empty()) {
      model.kernels.push_back(&program.kernels[k]);
      model.kernelMs.push_back(ms);
      continue;
    }
    model.persistent = &program.kernels[k];
    model.persistentMs = ms;
    for (const Kernel &part : program.kernels[k].parts) {
      model.kernels.push_back(&part);
      model.kernelMs.push_back(-1);
    }
  }
  std::map<std::string, int> byEntry;
  for (size_t k = 0; k < model.kernels.size(); ++k) {
    const Kernel &kernel = *model.kernels[k];
    const std::string &entry = kernel.entry.empty() ? kernel.name : kernel.entry;
    auto [found, added] = byEntry.try_emplace(entry, int(model.groups.size()));
    if (added) {
      KernelGroup group;
      group.entry = entry;
      group.color = kKernelColors[model.groups.size() % std::size(kKernelColors)];
      group.flops = kernel.flops;
      group.bytes = kernel.minBytes;
      model.groups.push_back(group);
    }
    KernelGroup &group = model.groups[size_t(found->second)];
    group.launches.push_back(k);
    group.totalMs = group.totalMs < 0 || model.kernelMs[k] < 0 ? -1 : group.totalMs + model.kernelMs[k];
    model.groupOfLaunch.push_back(found->second);
    for (const OpOrigin &origin : kernel.origins) {
      const SourceOp &op = program.sourceOps.at(size_t(origin.op));
      auto node = nodeAt.find({op.line, op.column});
      if (origin.role != OriginRole::Computes || node == nodeAt.end()) continue;
      model.groupOfOp[node->second] = found->second;
      model.launchOfOp[node->second] = k;
      group.ops.push_back(node->second);
    }
  }
  for (KernelGroup &group : model.groups) {
    std::sort(group.ops.begin(), group.ops.end());
    group.ops.erase(std::unique(group.ops.begin(), group.ops.end()), group.ops.end());
    group.ms = group.totalMs < 0 ? -1 : group.totalMs / double(group.launches.size());
  }
  return model;
}

Roof buildRoof(const ReportData &data, const std::vector<LevelModel> &levels) {
  Roof roof;
  double tflops = data.ladder.dtype == "bf16" ? data.roof.bf16Tflops : data.roof.fp32Tflops;
  if (tflops > 0 && data.roof.bandwidthTBs > 0) {
    roof.gflops = tflops * 1e3;
    roof.gbs = data.roof.bandwidthTBs * 1e3;
    roof.label = fmt::format("{}: {:g} TFLOP/s {}, {:g} TB/s (data sheet)", data.roof.part, tflops, data.ladder.dtype,
                             data.roof.bandwidthTBs);
    return roof;
  }
  roof.measured = true;
  for (const LevelModel &level : levels) {
    std::vector<KernelGroup> timed = level.groups;
    if (level.persistent) timed.push_back(persistentGroup(level));
    for (const KernelGroup &group : timed) {
      roof.gflops = std::max(roof.gflops, gflopsOf(group));
      roof.gbs = std::max(roof.gbs, gbsOf(group));
    }
  }
  roof.label = fmt::format("{}: measured roof, the best rates any kernel here reached ({:.1f} GFLOP/s, {:.1f} GB/s); "
                           "tlc knows no data sheet for it",
                           data.device, roof.gflops, roof.gbs);
  return roof;
}

// DOT's quoted strings.
std::string quote(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace

double gflopsOf(const KernelGroup &group) { return group.ms > 0 ? double(group.flops) / group.ms / 1e6 : 0; }

KernelGroup persistentGroup(const LevelModel &level) {
  KernelGroup whole;
  if (!level.persistent) return whole;
  whole.entry = level.persistent->entry;
  whole.flops = level.persistent->flops;
  whole.bytes = level.persistent->minBytes;
  whole.ms = whole.totalMs = level.persistentMs;
  return whole;
}
double gbsOf(const KernelGroup &group) { return group.ms > 0 ? double(group.bytes) / group.ms / 1e6 : 0; }

double Roof::fraction(const KernelGroup &group) const {
  if (group.ms <= 0 || gflops <= 0 || gbs <= 0) return 0;
  double idealMs = std::max(double(group.flops) / gflops, double(group.bytes) / gbs) / 1e6;
  return idealMs / group.ms;
}

std::string kernelHref(int level, int group) { return fmt::format("#O{}/k{}", level, group); }
std::string opHref(int level, int op) { return fmt::format("#O{}/op{}", level, op); }

std::string escapeHtml(const std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

ReportModel buildReportModel(const ReportData &data) {
  ReportModel model{data, {}, {}, {}, 0};
  for (size_t level = 0; level < data.levels.size(); ++level)
    model.levels.push_back(buildLevel(data, data.levels[level], int(level)));
  model.roof = buildRoof(data, model.levels);
  for (const SourceNode &op : data.ops) {
    model.shown.push_back(!op.weight && op.layer <= 0);
    model.blocks = std::max(model.blocks, op.layer + 1);
  }
  return model;
}

std::string graphSvg(const ReportModel &model, int level) {
  const LevelModel &lm = model.levels[size_t(level)];
  const std::vector<SourceNode> &ops = model.data.ops;
  std::string dot = "digraph block {\n"
                    "  graph [fontname=\"Helvetica\", fontsize=9, nodesep=0.2, ranksep=0.25, bgcolor=\"transparent\"];\n"
                    "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, height=0.3, "
                    "fillcolor=\"white\"];\n  edge [color=\"#777777\", arrowsize=0.5];\n";
  auto nodeLine = [&](int i) {
    const SourceNode &op = ops[size_t(i)];
    auto group = lm.groupOfOp.find(i);
    std::string kind = op.kind.rfind("tl.", 0) == 0 ? op.kind.substr(3) : op.kind;
    std::string attrs = fmt::format("id={}, label={}, class=\"op\"", quote(fmt::format("O{}-op{}", level, i)),
                                    quote(op.name + "\n" + kind));
    if (group != lm.groupOfOp.end())
      attrs += fmt::format(", fillcolor={}, URL={}, tooltip={}", quote(lm.groups[size_t(group->second)].color),
                           quote(opHref(level, i)), quote(lm.groups[size_t(group->second)].entry));
    return fmt::format("    n{} [{}];\n", i, attrs);
  };
  // Ops by launch: a box around each launch of two or more of the ops shown.
  std::map<size_t, std::vector<int>> byLaunch;
  std::vector<int> loose;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!model.shown[i]) continue;
    auto launch = lm.launchOfOp.find(int(i));
    if (launch == lm.launchOfOp.end()) loose.push_back(int(i));
    else byLaunch[launch->second].push_back(int(i));
  }
  for (const auto &[launch, members] : byLaunch) {
    if (members.size() < 2) {
      loose.insert(loose.end(), members.begin(), members.end());
      continue;
    }
    int group = lm.groupOfLaunch[launch];
    const KernelGroup &kernel = lm.groups[size_t(group)];
    dot += fmt::format("  subgraph cluster_{} {{\n    id={}; label={}; URL={}; style=\"rounded,dashed\"; color=\"#555555\";\n",
                       launch, quote(fmt::format("O{}-k{}-launch{}", level, group, launch)), quote(kernel.entry),
                       quote(kernelHref(level, group)));
    for (int i : members) dot += nodeLine(i);
    dot += "  }\n";
  }
  for (int i : loose) dot += nodeLine(i);
  // The other blocks as one node, with the edges in and out of them.
  std::set<std::pair<std::string, std::string>> edges;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].weight) continue;
    std::string to = model.shown[i] ? fmt::format("n{}", i) : "others";
    for (int input : ops[i].inputs) {
      if (ops[size_t(input)].weight) continue;
      std::string from = model.shown[size_t(input)] ? fmt::format("n{}", input) : "others";
      if (from != to) edges.insert({from, to});
    }
  }
  if (model.blocks > 1)
    dot += fmt::format("  others [id={}, label={}, style=\"rounded,dashed\"];\n", quote(fmt::format("O{}-others", level)),
                       quote(fmt::format("blocks 1..{}\nthe same ops and kernels", model.blocks - 1)));
  for (const auto &[from, to] : edges) dot += fmt::format("  {} -> {};\n", from, to);
  dot += "}\n";
  std::string svg = layoutSvg(dot);
  size_t start = svg.find("<svg");  // inline: no XML prologue or doctype
  return start == std::string::npos ? svg : svg.substr(start);
}

namespace {

// A log scale from decade `low` to decade `high` onto pixels `from`..`to`.
struct LogScale {
  double low, high, from, to;
  double operator()(double value) const { return from + (std::log10(value) - low) / (high - low) * (to - from); }
};

LogScale decades(double smallest, double largest, double from, double to) {
  double low = std::floor(std::log10(smallest)), high = std::ceil(std::log10(largest * 1.01));
  return {low, std::max(high, low + 1), from, to};
}

// A kernel's point; `g` -1 for a persistent kernel (the whole level).
std::string point(const KernelGroup &group, int level, int g, double x, double y, const std::string &what) {
  return fmt::format(R"(<a href="{}"><circle class="point" id="roof-O{}-{}" data-level="{}" data-kernel="{}" cx="{:.1f}" cy="{:.1f}" r="5" fill="{}" stroke="#222" stroke-width="0.5">)"
                     R"(<title>O{} {}: {}</title></circle></a>)"
                     "\n",
                     g < 0 ? fmt::format("#O{}", level) : kernelHref(level, g), level,
                     g < 0 ? std::string("persistent") : fmt::format("k{}", g), level, g, x, y,
                     kLevelColors[level % 4], level, escapeHtml(group.entry), what);
}

// Every timed kernel of a level, with its index (-1: the persistent kernel).
std::vector<std::pair<int, KernelGroup>> timedGroups(const LevelModel &level) {
  std::vector<std::pair<int, KernelGroup>> timed;
  for (size_t g = 0; g < level.groups.size(); ++g)
    if (level.groups[g].ms > 0 && level.groups[g].bytes > 0) timed.push_back({int(g), level.groups[g]});
  if (level.persistent && level.persistentMs > 0) timed.push_back({-1, persistentGroup(level)});
  return timed;
}

std::string gridLines(const LogScale &scale, bool vertical, double a, double b) {
  std::string svg;
  for (double d = scale.low; d <= scale.high; ++d) {
    double at = scale(std::pow(10, d));
    svg += vertical ? fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#eee"/><text x="{0:.1f}" y="{3}" text-anchor="middle">{4:g}</text>)"
                                  "\n",
                                  at, a, b, b + 15, std::pow(10, d))
                    : fmt::format(R"(<line x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}" stroke="#eee"/><text x="{3}" y="{4:.1f}" text-anchor="end">{5:g}</text>)"
                                  "\n",
                                  a, b, at, a - 5, at + 4, std::pow(10, d));
  }
  return svg;
}

} // namespace

std::string rooflineSvg(const ReportModel &model) {
  const Roof &roof = model.roof;
  // The roofline proper, and on its left the kernels that do no arithmetic (copies,
  // layouts, the embedding gather): those only by bandwidth.
  constexpr double W = 860, H = 440, strip = 60, gap = 70, left = strip + gap + 60, right = 20, top = 24, bottom = 50;
  double minX = roof.gflops / roof.gbs, maxX = minX, minY = roof.gflops, maxY = roof.gflops;
  double minBandwidth = roof.gbs, maxBandwidth = roof.gbs;
  for (const LevelModel &level : model.levels)
    for (const auto &[g, group] : timedGroups(level)) {
      if (group.flops == 0) {
        minBandwidth = std::min(minBandwidth, gbsOf(group));
        continue;
      }
      double x = double(group.flops) / double(group.bytes), y = gflopsOf(group);
      minX = std::min(minX, x), maxX = std::max(maxX, x), minY = std::min(minY, y), maxY = std::max(maxY, y);
    }
  LogScale px = decades(minX, maxX, left, W - right), py = decades(minY, maxY, H - bottom, top);
  LogScale pb = decades(minBandwidth, maxBandwidth, H - bottom, top);
  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="roofline" width="{}" height="{}" viewBox="0 0 {} {}" font-family="sans-serif" font-size="11">)"
                                "\n",
                                W, H, W, H);
  svg += gridLines(px, true, top, H - bottom) + gridLines(py, false, left, W - right) +
         gridLines(pb, false, gap, gap + strip);
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">arithmetic intensity, FLOP per byte moved (at least)</text>)"
                     R"svg(<text transform="translate({} {}) rotate(-90)" text-anchor="middle">GFLOP/s</text>)svg"
                     R"(<text x="{}" y="{}" text-anchor="middle">no FLOPs</text>)"
                     R"svg(<text transform="translate(14 {}) rotate(-90)" text-anchor="middle">GB/s</text>)svg"
                     "\n",
                     (W + left) / 2, H - 12, left - 45, (H - bottom + top) / 2, gap + strip / 2, H - bottom + 15,
                     (H - bottom + top) / 2);
  // The roofs: bandwidth up to the ridge, then the peak; and the bandwidth alone.
  double xLow = std::pow(10, px.low), xHigh = std::pow(10, px.high), ridge = roof.gflops / roof.gbs;
  svg += fmt::format(R"(<polyline class="roof" fill="none" stroke="#333" stroke-width="1.5" points="{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}"/>)"
                     R"(<line class="roof" x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#333" stroke-width="1.5"/>)"
                     "\n",
                     px(xLow), py(std::max(roof.gbs * xLow, std::pow(10, py.low))), px(ridge), py(roof.gflops),
                     px(xHigh), py(roof.gflops), gap, gap + strip, pb(roof.gbs), pb(roof.gbs));
  for (const LevelModel &level : model.levels)
    for (const auto &[g, group] : timedGroups(level)) {
      std::string what = fmt::format("{:.2f} FLOP/B, {:.2f} GFLOP/s, {:.2f} GB/s, {:.0f}% of the roof",
                                     double(group.flops) / double(group.bytes), gflopsOf(group), gbsOf(group),
                                     100 * roof.fraction(group));
      if (group.flops == 0)
        svg += point(group, level.level, g, gap + 12 + 12 * level.level, pb(gbsOf(group)), what);
      else
        svg += point(group, level.level, g, px(double(group.flops) / double(group.bytes)), py(gflopsOf(group)), what);
    }
  for (size_t l = 0; l < model.levels.size(); ++l)
    svg += fmt::format(R"(<circle cx="{}" cy="{}" r="5" fill="{}"/><text x="{}" y="{}">O{}</text>)"
                       "\n",
                       W - right - 180 + 45 * double(l), top + 12, kLevelColors[l % 4], W - right - 172 + 45 * double(l),
                       top + 16, l);
  return svg + "</svg>\n";
}

namespace {

// Where one task of a persistent kernel ran, in µs from the kernel's start.
struct TaskSpan {
  double start = 0, end = 0;
};

// The schedule's placement: each task starts when its worker is free and the tasks it
// waits for are done, at the schedule's estimated costs.
std::vector<TaskSpan> estimatedSpans(const Kernel &kernel) {
  std::vector<TaskSpan> spans(kernel.tasks.size());
  std::vector<int> before(kernel.tasks.size(), -1);  // the worker's task before it
  for (const std::vector<int> &worker : kernel.workers)
    for (size_t i = 1; i < worker.size(); ++i) before[size_t(worker[i])] = worker[i - 1];
  for (size_t t = 0; t < kernel.tasks.size(); ++t) {  // tasks are in a topological order
    double ready = before[t] >= 0 ? spans[size_t(before[t])].end : 0;
    for (int wait : kernel.tasks[t].waits) ready = std::max(ready, spans[size_t(wait)].end);
    spans[t] = {ready, ready + kernel.tasks[t].cost};
  }
  return spans;
}

// As the GPU stamped them: from each task's start (after its waits) to its end.
std::vector<TaskSpan> measuredSpans(const Kernel &kernel, const std::vector<TaskTiming> &times) {
  std::vector<TaskSpan> spans(kernel.tasks.size());
  for (const TaskTiming &timing : times)
    if (timing.task >= 0 && size_t(timing.task) < spans.size()) spans[size_t(timing.task)] = {timing.start, timing.end};
  return spans;
}

// A persistent kernel's tasks on its workers (one row each; a worker is an SM's, or a
// share of one): a run of one part's tasks back to back on a worker is one bar.
std::string tasksSvg(const LevelModel &lm, const std::vector<TaskSpan> &spans, const std::string &caption) {
  const Kernel &kernel = *lm.persistent;
  double total = 0;
  for (const TaskSpan &span : spans) total = std::max(total, span.end);
  constexpr double W = 960, left = 90, right = 10, rowHeight = 4, top = 10;
  double H = top + rowHeight * double(kernel.workers.size()) + 25;
  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{}" height="{}" viewBox="0 0 {} {}" font-family="sans-serif" font-size="10">)"
                                "\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} workers</text>\n",
                                W, H, W, H, left - 6, top + 10, kernel.workers.size());
  size_t firstPart = size_t(std::find(lm.kernels.begin(), lm.kernels.end(), &kernel.parts.front()) - lm.kernels.begin());
  double scale = total > 0 ? (W - left - right) / total : 0;
  for (size_t w = 0; w < kernel.workers.size(); ++w) {
    const std::vector<int> &worker = kernel.workers[w];
    for (size_t i = 0; i < worker.size();) {
      size_t j = i + 1;
      const Task &first = kernel.tasks[size_t(worker[i])];
      while (j < worker.size() && kernel.tasks[size_t(worker[j])].part == first.part &&
             spans[size_t(worker[j])].start <= spans[size_t(worker[j - 1])].end)
        ++j;
      const TaskSpan &from = spans[size_t(worker[i])], &to = spans[size_t(worker[j - 1])];
      int group = lm.groupOfLaunch[firstPart + size_t(first.part)];
      svg += fmt::format(R"(<rect class="launch" data-kernel="{}" data-tasks="{}" x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}">)"
                         R"(<title>worker {}, part {} ({}): {} task{}, {:.1f}-{:.1f} µs</title></rect>)"
                         "\n",
                         group, j - i, left + from.start * scale, top + rowHeight * double(w),
                         std::max(0.5, (to.end - from.start) * scale), rowHeight - 1, lm.groups[size_t(group)].color, w,
                         first.part, escapeHtml(lm.groups[size_t(group)].entry), j - i, j - i == 1 ? "" : "s",
                         from.start, to.end);
      i = j;
    }
  }
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{:.1f} µs: {}</text>)"
                     "\n",
                     W - right, H - 6, total, escapeHtml(caption));
  return svg + "</svg>\n";
}

} // namespace

std::string timelineSvg(const ReportModel &model, int level) {
  const LevelModel &lm = model.levels[size_t(level)];
  if (lm.persistent) {
    const std::vector<TaskTiming> &times = model.data.levels[size_t(level)].taskTimes;
    if (!times.empty())
      return tasksSvg(lm, measuredSpans(*lm.persistent, times),
                      "each task as the GPU's clock stamped it in the last timed forward; a gap is a worker waiting");
    return tasksSvg(lm, estimatedSpans(*lm.persistent),
                    fmt::format("the schedule's estimate (Task::cost) for {}, not a measurement", lm.persistent->taskPath));
  }
  double total = 0;
  for (double ms : lm.kernelMs) total += std::max(0.0, ms);
  constexpr double W = 960, left = 90, right = 10, rowHeight = 16, top = 20;
  int rows = model.blocks + 1;  // outside the blocks, then each block
  double H = top + rowHeight * rows + 25;
  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{}" height="{}" viewBox="0 0 {} {}" font-family="sans-serif" font-size="10">)"
                                "\n",
                                W, H, W, H);
  for (int r = 0; r < rows; ++r)
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)"
                       "\n",
                       left - 6, top + rowHeight * (r + 0.7), r == 0 ? std::string("outside blocks") : fmt::format("block {}", r - 1));
  double start = 0;
  for (size_t k = 0; k < lm.kernels.size(); ++k) {
    int layer = lm.kernels[k]->layer, group = lm.groupOfLaunch[k];
    double ms = std::max(0.0, lm.kernelMs[k]);
    double x = left + (total > 0 ? start / total : 0) * (W - left - right);
    double width = std::max(1.0, (total > 0 ? ms / total : 0) * (W - left - right));
    svg += fmt::format(R"(<a href="{}"><rect class="launch" data-kernel="{}" x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{}" fill="{}" stroke="#555" stroke-width="0.3">)"
                       R"(<title>launch {}: {} ({:.3f} ms)</title></rect></a>)"
                       "\n",
                       kernelHref(level, group), group, x, top + rowHeight * (layer + 1) + 2, width, rowHeight - 4,
                       lm.groups[size_t(group)].color, k, escapeHtml(lm.groups[size_t(group)].entry), ms);
    start += ms;
  }
  svg += fmt::format(R"(<text x="{}" y="{}">0</text><text x="{}" y="{}" text-anchor="end">{:.2f} ms: every launch's median time, laid end to end</text>)"
                     "\n",
                     left, H - 6, W - right, H - 6, total);
  return svg + "</svg>\n";
}

namespace {

// The launches at two levels that share a model op, joined: what one fusion replaced
// (in one block); the same replacement in every block is one row.
struct Replacement {
  std::map<int, size_t> before, after;  // group -> launches
};

std::vector<Replacement> replacements(const ReportModel &model, size_t above) {
  const LevelModel &lower = model.levels[above - 1], &upper = model.levels[above];
  const Program &below = model.data.levels[above - 1].program, &over = model.data.levels[above].program;
  // Launches computing each op, at both levels: union them.
  size_t n = lower.kernels.size();
  std::vector<size_t> parent(n + upper.kernels.size());
  std::iota(parent.begin(), parent.end(), 0);
  std::function<size_t(size_t)> root = [&](size_t i) { return parent[i] == i ? i : parent[i] = root(parent[i]); };
  std::map<std::pair<int, int>, std::vector<size_t>> byPlace;  // source op -> launches (both levels)
  for (size_t k = 0; k < parent.size(); ++k) {
    const Program &program = k < n ? below : over;
    const Kernel &kernel = k < n ? *lower.kernels[k] : *upper.kernels[k - n];
    for (const OpOrigin &origin : kernel.origins) {
      const SourceOp &op = program.sourceOps.at(size_t(origin.op));
      if (origin.role == OriginRole::Computes) byPlace[{op.line, op.column}].push_back(k);
    }
  }
  for (const auto &[place, launches] : byPlace)
    for (size_t k : launches) parent[root(k)] = root(launches.front());
  std::map<size_t, Replacement> components;
  for (size_t k = 0; k < parent.size(); ++k) {
    Replacement &r = components[root(k)];
    if (k < n) ++r.before[lower.groupOfLaunch[k]];
    else ++r.after[upper.groupOfLaunch[k - n]];
  }
  // The same replacement (the same kernels, in the same proportions) once, counted.
  std::map<std::pair<std::vector<int>, std::vector<int>>, Replacement> merged;
  std::vector<std::pair<std::vector<int>, std::vector<int>>> order;
  for (auto &[id, r] : components) {
    std::pair<std::vector<int>, std::vector<int>> key;
    for (auto &[g, count] : r.before) key.first.push_back(g);
    for (auto &[g, count] : r.after) key.second.push_back(g);
    auto [found, added] = merged.try_emplace(key, r);
    if (added) order.push_back(key);
    else {
      for (auto &[g, count] : r.before) found->second.before[g] += count;
      for (auto &[g, count] : r.after) found->second.after[g] += count;
    }
  }
  std::vector<Replacement> all;
  for (const auto &key : order) all.push_back(merged[key]);
  return all;
}

struct Totals {
  size_t launches = 0;
  double mib = 0, ms = 0;
};

Totals totalsOf(const LevelModel &level, const std::map<int, size_t> &launches) {
  Totals t;
  for (const auto &[g, count] : launches) {
    const KernelGroup &group = level.groups[size_t(g)];
    t.launches += count;
    t.mib += double(group.bytes) * double(count) / (1 << 20);
    t.ms = t.ms < 0 || group.ms < 0 ? -1 : t.ms + group.ms * double(count);
  }
  return t;
}

// The forward's time: its launches' medians, summed (a persistent kernel's own).
double forwardMs(const LevelModel &level) {
  if (level.persistent) return level.persistentMs;
  double total = 0;
  for (double ms : level.kernelMs) total += ms;
  return total;
}

std::string kernelLinks(const LevelModel &level, const std::map<int, size_t> &launches) {
  std::string out;
  for (const auto &[g, count] : launches)
    out += fmt::format(R"(<a href="{}" class="kref"><span class="swatch" style="background:{}"></span>{}</a> ×{}<br>)",
                       kernelHref(level.level, g), level.groups[size_t(g)].color,
                       escapeHtml(level.groups[size_t(g)].entry), count);
  return out;
}

std::string change(double before, double after, const char *format) {
  if (before < 0 || after < 0) return "- (the parts of a persistent kernel are not timed alone)";
  std::string ratio = before > 0 ? fmt::format(" <span class=\"ratio\">({:.2f}x)</span>", after / before) : "";
  return fmt::format(fmt::runtime(format), before) + " → " + fmt::format(fmt::runtime(format), after) + ratio;
}

} // namespace

std::string fusionTablesHtml(const ReportModel &model) {
  std::string html;
  for (size_t l = 1; l < model.levels.size(); ++l) {
    const LevelModel &below = model.levels[l - 1], &above = model.levels[l];
    html += fmt::format("<h3>O{} → O{}: {}</h3>\n", l - 1, l, escapeHtml(optLevelInfo(int(l)).workshopVersion));
    html += fmt::format("<table class=\"fusion\"><tr><th>kernels at O{}</th><th>kernels at O{}</th><th>launches</th>"
                        "<th>MiB moved</th><th>time, ms</th></tr>\n",
                        l - 1, l);
    size_t unchanged = 0;
    Totals before, after;
    for (const Replacement &r : replacements(model, l)) {
      Totals b = totalsOf(below, r.before), a = totalsOf(above, r.after);
      before.launches += b.launches, before.mib += b.mib;
      after.launches += a.launches, after.mib += a.mib;
      if (r.before.size() == 1 && r.after.size() == 1 && b.launches == a.launches &&
          below.groups[size_t(r.before.begin()->first)].entry == above.groups[size_t(r.after.begin()->first)].entry) {
        unchanged += b.launches;
        continue;
      }
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{} → {}</td><td>{}</td><td>{}</td></tr>\n",
                          kernelLinks(below, r.before), kernelLinks(above, r.after), b.launches, a.launches,
                          change(b.mib, a.mib, "{:.2f}"), change(b.ms, a.ms, "{:.3f}"));
    }
    before.ms = forwardMs(below), after.ms = forwardMs(above);
    html += fmt::format("<tr class=\"total\"><td colspan=\"2\">the whole forward{}</td><td>{} → {}</td><td>{}</td>"
                        "<td>{}</td></tr>\n</table>\n",
                        unchanged ? fmt::format(" ({} launch{} of the same kernel before and after)", unchanged,
                                                unchanged == 1 ? "" : "es")
                                  : "",
                        before.launches, after.launches, change(before.mib, after.mib, "{:.2f}"),
                        change(before.ms, after.ms, "{:.3f}"));
  }
  return html;
}

} // namespace tlc
