#include "tools/LadderChart.h"

#include "runtime/OptLevels.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace tlc {
namespace {

constexpr int kPanelWidth = 300, kPanelHeight = 260, kTop = 70, kBarArea = 170;
const char *kColors[] = {"#9aa5b1", "#5b8def", "#2fb380", "#f08c2e"};  // O0..O3

struct Panel {
  std::string title;
  std::function<double(const LadderRung &)> value;
  std::string format;  // for the number over each bar
};

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

std::string drawPanel(const Ladder &ladder, const Panel &panel, int x0, bool speedups) {
  double largest = 0;
  for (const LadderRung &rung : ladder.rungs) largest = std::max(largest, panel.value(rung));
  std::string svg = fmt::format(R"(<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>)"
                                "\n",
                                x0 + 20, kTop - 25, escape(panel.title));
  int slot = (kPanelWidth - 40) / int(ladder.rungs.size());
  int baseline = kTop + kBarArea;
  svg += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)"
                     "\n",
                     x0 + 20, baseline, x0 + kPanelWidth - 20, baseline);
  for (size_t i = 0; i < ladder.rungs.size(); ++i) {
    const LadderRung &rung = ladder.rungs[i];
    double value = panel.value(rung);
    int height = largest > 0 ? int(value / largest * (kBarArea - 20)) : 0;
    int x = x0 + 20 + int(i) * slot + slot / 6;
    int width = slot * 2 / 3;
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)"
                       "\n",
                       x, baseline - height, width, height, kColors[rung.level % 4]);
    std::string label = fmt::format(fmt::runtime(panel.format), value);
    if (speedups && i > 0 && rung.milliseconds > 0)
      label += fmt::format(" ({:.2f}x)", ladder.rungs[0].milliseconds / rung.milliseconds);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>)"
                       "\n",
                       x + width / 2, baseline - height - 5, escape(label));
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">O{}</text>)"
                       "\n",
                       x + width / 2, baseline + 16, rung.level);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="9" text-anchor="middle" fill="#555">{}</text>)"
                       "\n",
                       x + width / 2, baseline + 30, escape(optLevelInfo(rung.level).workshopVersion));
  }
  return svg;
}

} // namespace

std::string ladderChartSvg(const Ladder &ladder) {
  std::vector<Panel> panels = {
      {"kernels per forward", [](const LadderRung &r) { return double(r.kernels); }, "{:.0f}"},
      {"MiB moved (at least)", [](const LadderRung &r) { return double(r.minBytes) / (1 << 20); }, "{:.1f}"},
      {fmt::format("time per forward, ms ({})", ladder.target), [](const LadderRung &r) { return r.milliseconds; },
       "{:.2f}"},
  };
  int width = kPanelWidth * int(panels.size()), height = kTop + kPanelHeight - 20;
  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )"
                                R"(viewBox="0 0 {0} {1}" font-family="sans-serif">)"
                                "\n",
                                width, height);
  svg += fmt::format(R"(<rect width="{}" height="{}" fill="white"/>)"
                     "\n",
                     width, height);
  svg += fmt::format(R"(<text x="20" y="22" font-size="15">tlc ladder: {}, {}, batch {} x seq {}, {}, median of {} forward{}</text>)"
                     "\n",
                     escape(ladder.model), ladder.dtype, ladder.batch, ladder.seqLen, escape(ladder.target),
                     ladder.timedRuns, ladder.timedRuns == 1 ? "" : "s");
  for (size_t i = 0; i < panels.size(); ++i)
    svg += drawPanel(ladder, panels[i], int(i) * kPanelWidth, /*speedups=*/i + 1 == panels.size());
  svg += "</svg>\n";
  return svg;
}

} // namespace tlc
