// The report's pages: one index.html with every view, report.css and report.js beside
// it (embedded at build time from tools/report/). Everything a view needs is in the HTML; the
// script only switches views and follows a selection across them.
#include "tools/Report.h"

#include "runtime/Error.h"
#include "runtime/MemoryBudget.h"
#include "runtime/OptLevels.h"
#include "runtime/OutputFile.h"
#include "tools/LadderChart.h"
#include "tools/ReportAssets.h"
#include "tools/ReportModel.h"
#include "tools/TextDiff.h"

#include "llvm/Support/FileSystem.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

namespace tlc {
namespace {

// "135.3 MFLOP", "0".
std::string formatFlops(int64_t flops) {
  const char *units[] = {"", "k", "M", "G", "T"};
  double value = double(flops);
  int unit = 0;
  while (value >= 1000 && unit < 4) value /= 1000, ++unit;
  return flops == 0 ? "0" : fmt::format("{:.1f} {}FLOP", value, units[unit]);
}

// "12.3456 ms", or "-" for what was not timed alone.
std::string formatMs(double ms, const char *format = "{:.4f}") {
  return ms < 0 ? "-" : fmt::format(fmt::runtime(format), ms);
}

std::string rangeOfBlocks(const LevelModel &level, const std::vector<size_t> &launches) {
  std::vector<int> blocks;
  bool outside = false;
  for (size_t k : launches) {
    int layer = level.kernels[k]->layer;
    if (layer < 0) outside = true;
    else blocks.push_back(layer);
  }
  std::string text;
  if (!blocks.empty())
    text = blocks.size() == 1 ? fmt::format("block {}", blocks[0])
                              : fmt::format("blocks {}-{}", *std::min_element(blocks.begin(), blocks.end()),
                                            *std::max_element(blocks.begin(), blocks.end()));
  if (outside) text += text.empty() ? "outside the blocks" : " and outside them";
  return text;
}

// The generated source as a learner reads it: the header and the kernel's own code,
// each model op named in the header marked; the shared prelude and templates elided.
std::string codeHtml(const ReportData &data, const std::string &source, const std::vector<int> &ops) {
  size_t preludeStart = source.find("// ---- tlc: the same source");
  const std::string end = "// ---- end of templates ----\n";
  size_t own = source.find(end);
  std::string text = source;
  if (preludeStart != std::string::npos && own != std::string::npos)
    text = source.substr(0, preludeStart) +
           fmt::format("// ... the vendor prelude and device templates ({:.1f} KiB) ...\n",
                       double(own + end.size() - preludeStart) / 1024) +
           source.substr(own + end.size());
  std::string html = escapeHtml(text);
  for (int op : ops) {
    const SourceNode &node = data.ops[size_t(op)];
    std::string spelled = escapeHtml(fmt::format("{}:{} {} = {}", node.line, node.column, node.name, node.kind));
    size_t at = html.find(spelled);
    if (at != std::string::npos)
      html.replace(at, spelled.size(), fmt::format("<mark class=\"src\" data-op=\"{}\">{}</mark>", op, spelled));
  }
  return html;
}

std::string opLink(const ReportData &data, int level, int op) {
  const SourceNode &node = data.ops[size_t(op)];
  return fmt::format(R"(<a href="{}" class="opref" data-op="{}">{}</a> <span class="kind">{}, line {}</span>)",
                     opHref(level, op), op, escapeHtml(node.name), escapeHtml(node.kind), node.line);
}

std::string kernelArticle(const ReportModel &model, int level, int g) {
  const LevelModel &lm = model.levels[size_t(level)];
  const KernelGroup &group = lm.groups[size_t(g)];
  const Kernel &first = *lm.kernels[group.launches.front()];
  std::string shown, others;
  int hidden = 0;
  for (int op : group.ops) {
    if (model.shown[size_t(op)]) shown += "<li>" + opLink(model.data, level, op) + "</li>";
    else ++hidden;
  }
  if (hidden) others = fmt::format("<li class=\"more\">and {} ops of blocks 1..{}: the same ops on their own weights</li>",
                                   hidden, model.blocks - 1);
  double fraction = model.roof.fraction(group);
  std::string html = fmt::format(
      R"(<article class="kernel" id="O{0}-k{1}" data-level="{0}" data-kernel="{1}">)"
      "\n<h3><span class=\"swatch\" style=\"background:{2}\"></span>{3}</h3>\n"
      "<p class=\"launches\">{4} launch{5} ({6}), each {7}{17}</p>\n"
      "<table class=\"stats\"><tr><th>FLOPs</th><th>bytes moved (at least)</th><th>time</th><th>GFLOP/s</th><th>GB/s</th>"
      "<th>FLOP/byte</th><th>roofline</th></tr>\n<tr><td>{8}</td><td>{9}</td><td>{10} ms</td><td>{11:.2f}</td>"
      "<td>{12:.2f}</td><td>{13:.2f}</td><td>{14}</td></tr></table>\n"
      "<p>The model ops it computes:</p><ul class=\"ops\">{15}{16}</ul>\n",
      level, g, group.color, escapeHtml(group.entry), group.launches.size(), group.launches.size() == 1 ? "" : "es",
      rangeOfBlocks(lm, group.launches), escapeHtml(first.name), formatFlops(group.flops), formatBytes(group.bytes),
      formatMs(group.ms), gflopsOf(group), gbsOf(group), group.bytes > 0 ? double(group.flops) / double(group.bytes) : 0.0,
      fraction > 0 ? fmt::format("{:.1f}%", 100 * fraction) : std::string("-"), shown, others,
      lm.persistent ? fmt::format("; part of the persistent kernel {}, whose tasks its blocks are (not timed alone)",
                                  escapeHtml(lm.persistent->entry))
                    : "");
  if (!first.source.empty())
    html += "<details open><summary>generated source (HIP-dialect C++, --emit=hip)</summary><pre class=\"code\">" +
            codeHtml(model.data, first.source, group.ops) + "</pre></details>\n";
  return html + "</article>\n";
}

std::string kernelTable(const ReportModel &model, int level) {
  const LevelModel &lm = model.levels[size_t(level)];
  std::string html = "<table class=\"kernels\"><tr><th>kernel</th><th>launches</th><th>ms each</th><th>ms in all</th>"
                     "<th>roofline</th></tr>\n";
  for (size_t g = 0; g < lm.groups.size(); ++g) {
    const KernelGroup &group = lm.groups[g];
    double fraction = model.roof.fraction(group);
    html += fmt::format(R"(<tr data-kernel="{}"><td><a href="{}" class="kref"><span class="swatch" style="background:{}"></span>{}</a></td>)"
                        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        g, kernelHref(level, int(g)), group.color, escapeHtml(group.entry), group.launches.size(),
                        formatMs(group.ms), formatMs(group.totalMs, "{:.3f}"),
                        fraction > 0 ? fmt::format("{:.1f}%", 100 * fraction) : "-");
  }
  return html + "</table>\n";
}

// One pass's step: its remarks, then its diff against the step before (kept lines far
// from a change hidden while only the changes are shown).
std::string stepArticle(const ReportModel &model, int level, size_t index) {
  const std::vector<PassStep> &steps = model.data.levels[size_t(level)].steps;
  const PassStep &step = steps[index];
  std::vector<DiffLine> diff = diffLines(index == 0 ? step.ir : steps[index - 1].ir, step.ir);
  bool changed = std::any_of(diff.begin(), diff.end(), [](const DiffLine &line) { return line.kind != ' '; });
  std::string remarks;
  int elsewhere = 0;
  for (const StepRemark &remark : step.remarks) {
    bool about = remark.ops.empty() ||
                 std::any_of(remark.ops.begin(), remark.ops.end(), [&](int op) { return model.shown[size_t(op)]; });
    if (!about) {
      ++elsewhere;
      continue;
    }
    std::string links;
    for (int op : remark.ops)
      if (model.shown[size_t(op)])
        links += fmt::format(R"( <a href="{}" class="opref" data-op="{}">{}</a>)", opHref(level, op), op,
                             escapeHtml(model.data.ops[size_t(op)].name));
    remarks += fmt::format("<li class=\"remark {}\"><b>{}</b> {}<span class=\"links\">{}</span></li>\n",
                           remark.fused ? "fused" : "missed", remark.fused ? "fused:" : "missed:",
                           escapeHtml(remark.message), links);
  }
  if (elsewhere) remarks += fmt::format("<li class=\"more\">and {} remarks like these about blocks 1..{}</li>\n", elsewhere, model.blocks - 1);
  std::string lines;
  std::vector<bool> near(diff.size(), false);
  for (size_t i = 0; i < diff.size(); ++i)
    if (diff[i].kind != ' ')
      for (size_t j = i >= 3 ? i - 3 : 0; j < std::min(diff.size(), i + 4); ++j) near[j] = true;
  for (size_t i = 0; i < diff.size(); ++i) {
    const char *kind = diff[i].kind == '+' ? "add" : diff[i].kind == '-' ? "del" : near[i] ? "keep" : "keep far";
    if (changed && !near[i] && (i == 0 || near[i - 1])) lines += "<span class=\"gap\">   ...\n</span>";
    lines += fmt::format("<span class=\"{}\">{} {}\n</span>", kind, diff[i].kind, escapeHtml(diff[i].text));
  }
  return fmt::format(R"(<article class="step" id="O{0}-step{1}" data-step="{1}">)"
                     "\n<h4>{2}. {3} <span class=\"badge {4}\">{5}</span></h4>\n<ul class=\"remarks\">{6}</ul>\n"
                     "<pre class=\"diff\">{7}</pre>\n</article>\n",
                     level, index, index, escapeHtml(step.pass), changed ? "changed" : "same",
                     index == 0 ? "the input" : changed ? "changed the IR" : "changed nothing here",
                     remarks.empty() ? "<li class=\"none\">no remarks</li>" : remarks, lines);
}

std::string stepper(const ReportModel &model, int level) {
  const std::vector<PassStep> &steps = model.data.levels[size_t(level)].steps;
  std::string options, articles;
  for (size_t i = 0; i < steps.size(); ++i) {
    options += fmt::format("<option value=\"{}\">{}. {} ({} remark{})</option>", i, i, escapeHtml(steps[i].pass),
                           steps[i].remarks.size(), steps[i].remarks.size() == 1 ? "" : "s");
    articles += stepArticle(model, level, i);
  }
  return fmt::format("<div class=\"stepper\" data-level=\"{}\">\n<div class=\"controls\"><button class=\"prev\">◀ previous</button> "
                     "<select>{}</select> <button class=\"next\">next ▶</button> <label><input type=\"checkbox\" "
                     "class=\"changes-only\" checked> changes only</label></div>\n{}</div>\n",
                     level, options, articles);
}

// How a level runs: "43 launches of 8 kernels", or one persistent kernel of parts.
std::string howItRuns(const ReportModel &model, int level) {
  const LevelModel &lm = model.levels[size_t(level)];
  const Program &program = model.data.levels[size_t(level)].program;
  std::string text = lm.persistent
                         ? fmt::format("one launch of the persistent kernel {} ({:.3f} ms): {} parts of {} kernels, run as "
                                       "{} tasks on {} workers",
                                       lm.persistent->entry, lm.persistentMs, lm.kernels.size(), lm.groups.size(),
                                       lm.persistent->tasks.size(), lm.persistent->workers.size())
                         : fmt::format("{} launches of {} kernels", lm.kernels.size(), lm.groups.size());
  if (!program.persistentFallback.empty()) text += "; not one persistent kernel: " + program.persistentFallback;
  return escapeHtml(text);
}

// What the timeline shows, and where a persistent kernel's measured tasks need a GPU.
std::string timelineNote(const ReportModel &model, int level) {
  const LevelModel &lm = model.levels[size_t(level)];
  const LevelRun &run = model.data.levels[size_t(level)];
  std::string text;
  if (lm.persistent && !run.taskTimes.empty())
    text = "One launch of the persistent kernel: a row per worker (an SM, or a share of one), a bar per run of one "
           "part's tasks, as the GPU's clock stamped them.";
  else if (lm.persistent)
    text = fmt::format("One launch of the persistent kernel: a row per worker, its tasks where the static schedule "
                       "placed them at its estimated costs. Measured per-SM task times need a GPU: {}.",
                       model.data.device == "cpu"
                           ? "on the CPU the parts run one after another, so nothing here ran per SM (tlc report "
                             "--persistent on a GPU draws the tasks as they ran)"
                           : "this run recorded none");
  else if (level == kMaxOptLevel)
    text = "Each launch's median time, laid end to end. With --persistent, O3's forward is one persistent kernel "
           "instead, and on a GPU this view draws its tasks on each SM's workers as they ran.";
  else
    text = "Each launch's median time, laid end to end.";
  return "<p class=\"hint\">" + escapeHtml(text) + "</p>\n";
}

std::string levelSection(const ReportModel &model, int level) {
  const LevelRun &run = model.data.levels[size_t(level)];
  std::string articles;
  for (size_t g = 0; g < model.levels[size_t(level)].groups.size(); ++g) articles += kernelArticle(model, level, int(g));
  return fmt::format(
      "<section id=\"O{0}\" class=\"level view\" data-level=\"{0}\">\n<h2>O{0}: {1}</h2>\n<p class=\"idea\">{2}. "
      "{3}; pipeline: <code>{4}</code></p>\n"
      "<div class=\"panes\"><div class=\"graph\"><p class=\"hint\">Block 0 and the ops outside the blocks, as "
      "written in the model file: each op coloured by the kernel it runs in, boxed with the other ops of the same launch. "
      "Select an op or a kernel.</p>\n{5}</div>\n<div class=\"side\">{6}<div class=\"kernel-view\">{7}</div></div></div>\n"
      "<h3 id=\"O{0}-timeline\">Timeline</h3>\n{8}\n<h3 id=\"O{0}-passes\">Passes</h3>\n<p class=\"hint\">The IR after each "
      "pass (block 0; the other blocks are elided as in <code>--ir-block=0</code>), its diff against the step before, and "
      "what the pass said it fused and left apart (<code>tlc --remarks</code>).</p>\n{9}</section>\n",
      level, escapeHtml(optLevelInfo(level).workshopVersion), escapeHtml(optLevelInfo(level).idea),
      howItRuns(model, level), escapeHtml(run.program.pipeline),
      graphSvg(model, level), kernelTable(model, level), articles, timelineNote(model, level) + timelineSvg(model, level),
      stepper(model, level));
}

std::string ladderSection(const ReportModel &model) {
  const Ladder &ladder = model.data.ladder;
  std::string rows;
  for (const LadderRung &rung : ladder.rungs)
    rows += fmt::format("<tr><td><a href=\"#O{0}\">O{0}</a></td><td>{1}</td><td>{2}{3}</td><td>{4}</td><td>{5:.2f}</td>"
                        "<td>{6:.1f}</td><td>{7:.2f}</td><td>{8:.2f}x</td><td>{9}</td><td>{10:.4f}</td></tr>\n",
                        rung.level, escapeHtml(optLevelInfo(rung.level).workshopVersion), rung.kernels,
                        rung.chained ? "*" : "", rung.kernelsPerBlock, rung.gflop, double(rung.minBytes) / (1 << 20),
                        rung.milliseconds,
                        rung.milliseconds > 0 ? ladder.rungs.front().milliseconds / rung.milliseconds : 0.0,
                        rung.level == 0 ? std::string("-") : fmt::format("{:.2e}", rung.maxLogitDiff), rung.loss);
  std::string chart = ladderChartSvg(ladder);
  return fmt::format(
      "<section id=\"ladder\" class=\"view\">\n<h2>The ladder</h2>\n<p>Every level compiled and run on {} with the same "
      "weights ({}) and tokens ({}); time is the median of {} forward{} after a warm-up. On the CPU, the reference "
      "interpreter, fusion saves bytes but not time; the speedups are a GPU's.</p>\n<table class=\"ladder\"><tr>"
      "<th>level</th><th>workshop version</th><th>kernels</th><th>per block</th><th>GFLOP</th><th>MiB moved</th>"
      "<th>time ms</th><th>speedup</th><th>max |dlogit|</th><th>loss</th></tr>\n{}</table>\n{}\n{}</section>\n",
      escapeHtml(model.data.device), escapeHtml(ladder.weightsFrom), escapeHtml(ladder.tokensFrom), ladder.timedRuns,
      ladder.timedRuns == 1 ? "" : "s", rows,
      std::any_of(ladder.rungs.begin(), ladder.rungs.end(), [](const LadderRung &r) { return r.chained; })
          ? "<p class=\"note\">* some kernels launched chained: they start while the kernel before them finishes</p>"
          : "",
      chart);
}

std::string rooflineSection(const ReportModel &model) {
  std::string rows;
  auto row = [&](int level, int g, const KernelGroup &group) {
    double fraction = model.roof.fraction(group);
    bool timed = group.ms > 0;
    rows += fmt::format(R"(<tr data-level="{}" data-kernel="{}"><td>O{}</td><td><a href="{}" class="kref">{}</a></td>)"
                        "<td>{:.2f}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        level, g, level, g < 0 ? fmt::format("#O{}", level) : kernelHref(level, g),
                        escapeHtml(group.entry), group.bytes > 0 ? double(group.flops) / double(group.bytes) : 0.0,
                        timed ? fmt::format("{:.2f}", gflopsOf(group)) : "-",
                        timed ? fmt::format("{:.2f}", gbsOf(group)) : "-",
                        fraction > 0 ? fmt::format("{:.1f}%", 100 * fraction) : "-");
  };
  for (const LevelModel &level : model.levels) {
    for (size_t g = 0; g < level.groups.size(); ++g) row(level.level, int(g), level.groups[g]);
    if (level.persistent) row(level.level, -1, persistentGroup(level));
  }
  return fmt::format("<section id=\"roofline\" class=\"view\">\n<h2>Roofline</h2>\n<p>Every kernel of every level, "
                     "one point each (its launches' mean time; a persistent kernel's parts, not timed alone, as the one "
                     "kernel they make); selecting one rings the kernels of the other levels that compute any of the "
                     "same model ops. Roof: {}.</p>\n{}\n<table class=\"points\"><tr><th>level</th>"
                     "<th>kernel</th><th>FLOP/byte</th><th>GFLOP/s</th><th>GB/s</th><th>roofline</th></tr>\n{}</table>\n"
                     "</section>\n",
                     escapeHtml(model.roof.label), rooflineSvg(model), rows);
}

// What the script needs to follow a selection across views: each level's kernels'
// model ops (which links kernels of different levels) and which kernel computes each op.
std::string selectionData(const ReportModel &model) {
  nlohmann::json levels = nlohmann::json::array();
  for (const LevelModel &level : model.levels) {
    nlohmann::json kernels = nlohmann::json::array(), opKernel = nlohmann::json::object();
    for (const KernelGroup &group : level.groups) kernels.push_back(group.ops);
    nlohmann::json all = nlohmann::json::array();  // what a persistent kernel computes: every op
    for (const auto &[op, group] : level.groupOfOp) {
      opKernel[std::to_string(op)] = group;
      all.push_back(op);
    }
    levels.push_back({{"kernels", kernels}, {"opKernel", opKernel}, {"all", all}});
  }
  std::string text = nlohmann::json{{"levels", levels}}.dump();
  for (size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at)) text.replace(at, 2, "<\\/");
  return text;
}

std::string page(const ReportModel &model) {
  const ReportData &data = model.data;
  std::string nav = "<a href=\"#ladder\">Ladder</a>";
  std::string levels;
  for (size_t l = 0; l < data.levels.size(); ++l) {
    nav += fmt::format(" <a href=\"#O{0}\">O{0}</a>", l);
    levels += levelSection(model, int(l));
  }
  nav += " <a href=\"#roofline\">Roofline</a> <a href=\"#fusion\">What fusion bought</a>";
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tlc report: {0}</title>\n"
      "<link rel=\"stylesheet\" href=\"report.css\">\n</head>\n<body>\n<header>\n<h1>tlc report: {0}</h1>\n"
      "<p>{1}, {2}, batch {3} x seq {4}, on {5}: {7} model ops, {6} kernel launches over four levels. Made by <code>tlc report "
      "{1}</code> in {8:.1f} s.</p>\n<nav>{9}</nav>\n</header>\n<main>\n{10}{11}{12}<section id=\"fusion\" class=\"view\">\n"
      "<h2>What fusion bought</h2>\n<p>Each level over the one below: the kernels that compute the same model ops "
      "before and after its passes, their launches, the bytes they must move and their time (ms: the launches' "
      "medians, summed).</p>\n{13}</section>\n</main>\n<script type=\"application/json\" id=\"report-data\">{14}</script>\n"
      "<script src=\"report.js\"></script>\n</body>\n</html>\n",
      escapeHtml(data.ladder.model), escapeHtml(data.modelPath), escapeHtml(dtypeOf(data.ladder)), data.ladder.batch,
      data.ladder.seqLen, escapeHtml(data.device),
      std::accumulate(data.levels.begin(), data.levels.end(), size_t(0),
                      [](size_t n, const LevelRun &run) { return n + run.program.kernels.size(); }),
      std::count_if(data.ops.begin(), data.ops.end(), [](const SourceNode &op) { return !op.weight; }), data.seconds,
      nav, ladderSection(model), levels, rooflineSection(model), fusionTablesHtml(model), selectionData(model));
}

int64_t writeFile(const std::string &directory, const std::string &name, const std::string &text) {
  writeFileAtomically(directory + "/" + name, text, "report file");
  return int64_t(text.size());
}

} // namespace

int64_t writeReportSite(const ReportData &data, const std::string &directory) {
  if (std::error_code error = llvm::sys::fs::create_directories(directory))
    throw Error(fmt::format("cannot create '{}': {}", directory, error.message()));
  ReportModel model = buildReportModel(data);
  int64_t bytes = writeFile(directory, "index.html", page(model));
  for (const auto &[name, text] : reportAssets()) bytes += writeFile(directory, name, text);
  return bytes;
}

} // namespace tlc
