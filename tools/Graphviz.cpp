#include "tools/Graphviz.h"

#include "runtime/Error.h"

#include <graphviz/gvc.h>

#include <fmt/format.h>

#include <dlfcn.h>
#include <link.h>

#include <mutex>
#include <string>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TLC_LEAK_CHECKED 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define TLC_LEAK_CHECKED 1
#endif
#ifdef TLC_LEAK_CHECKED
#include <sanitizer/lsan_interface.h>
#endif

namespace tlc {
namespace {

// The few entry points tlc report calls, found in the loaded library.
struct Gvc {
  decltype(&::gvContextPlugins) context = nullptr;
  decltype(&::agmemread) read = nullptr;
  decltype(&::gvLayout) layout = nullptr;
  decltype(&::gvRenderData) render = nullptr;
  decltype(&::gvFreeRenderData) freeRender = nullptr;
  decltype(&::gvFreeLayout) freeLayout = nullptr;
  decltype(&::agclose) close = nullptr;
  GVC_t *gvc = nullptr;  // one for the process: Graphviz 2.42 keeps state across contexts
};

template <typename F> void find(void *library, const char *name, F &function) {
  function = reinterpret_cast<F>(::dlsym(library, name));
  if (!function) throw Error(fmt::format("Graphviz's libgvc has no '{}'", name));
}

// A plugin library beside libgvc (graphviz/<file>), as a builtin: its table `symbol`.
lt_symlist_t plugin(void *gvc, const char *file, const char *symbol) {
  link_map *map = nullptr;
  std::string path = ::dlinfo(gvc, RTLD_DI_LINKMAP, &map) == 0 && map ? std::string(map->l_name) : "";
  path = path.substr(0, path.find_last_of('/') + 1) + "graphviz/" + file;
  void *library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  void *table = library ? ::dlsym(library, symbol) : nullptr;
  if (!table) throw Error(fmt::format("tlc report needs Graphviz's plugin '{}'", path));
  return {symbol, table};
}

const Gvc &gvc() {
  static const Gvc loaded = [] {
    void *library = nullptr;
    for (const char *name : {"libgvc.so.6", "libgvc.so"})
      if ((library = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!library)
      throw Error("tlc report lays graphs out with Graphviz's libgvc, which is not installed "
                  "(Debian: apt-get install libgvc6)");
    Gvc gvc;
    find(library, "gvContextPlugins", gvc.context);
    find(library, "agmemread", gvc.read);
    find(library, "gvLayout", gvc.layout);
    find(library, "gvRenderData", gvc.render);
    find(library, "gvFreeRenderData", gvc.freeRender);
    find(library, "gvFreeLayout", gvc.freeLayout);
    find(library, "agclose", gvc.close);
    // The dot layout and the SVG renderer alone: text is measured by Graphviz's own font
    // metrics, not the fonts a machine has, so a graph lays out alike everywhere.
    static lt_symlist_t builtins[] = {
        plugin(library, "libgvplugin_dot_layout.so.6", "gvplugin_dot_layout_LTX_library"),
        plugin(library, "libgvplugin_core.so.6", "gvplugin_core_LTX_library"), {nullptr, nullptr}};
    gvc.gvc = gvc.context(builtins, 0);
    return gvc;
  }();
  return loaded;
}

} // namespace

std::string layoutSvg(const std::string &dot) {
  static std::mutex mutex;  // one context, one graph at a time
  std::lock_guard<std::mutex> lock(mutex);
  const Gvc &g = gvc();
#ifdef TLC_LEAK_CHECKED
  __lsan::ScopedDisabler graphvizLeaks;  // Graphviz 2.42 leaks a few blocks a layout
#endif
  Agraph_t *graph = g.read(dot.c_str());
  if (!graph) throw Error("Graphviz could not read the graph tlc report made");
  char *data = nullptr;
  unsigned length = 0;
  bool laidOut = g.layout(g.gvc, graph, "dot") == 0;
  bool rendered = laidOut && g.render(g.gvc, graph, "svg", &data, &length) == 0;
  std::string svg = rendered && data ? std::string(data, length) : "";
  if (data) g.freeRender(data);
  if (laidOut) g.freeLayout(g.gvc, graph);
  g.close(graph);
  if (!rendered) throw Error("Graphviz could not lay out the graph tlc report made");
  return svg;
}

} // namespace tlc
