#include "tools/Graphviz.h"

#include "runtime/Error.h"

#include <graphviz/gvc.h>

#include <fmt/format.h>

#include <dlfcn.h>

namespace tlc {
namespace {

// The few entry points tlc report calls, found in the loaded library.
struct Gvc {
  decltype(&::gvContext) context = nullptr;
  decltype(&::agmemread) read = nullptr;
  decltype(&::gvLayout) layout = nullptr;
  decltype(&::gvRenderData) render = nullptr;
  decltype(&::gvFreeRenderData) freeRender = nullptr;
  decltype(&::gvFreeLayout) freeLayout = nullptr;
  decltype(&::agclose) close = nullptr;
  decltype(&::gvFreeContext) freeContext = nullptr;
};

template <typename F> void find(void *library, const char *name, F &function) {
  function = reinterpret_cast<F>(::dlsym(library, name));
  if (!function) throw Error(fmt::format("Graphviz's libgvc has no '{}'", name));
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
    find(library, "gvContext", gvc.context);
    find(library, "agmemread", gvc.read);
    find(library, "gvLayout", gvc.layout);
    find(library, "gvRenderData", gvc.render);
    find(library, "gvFreeRenderData", gvc.freeRender);
    find(library, "gvFreeLayout", gvc.freeLayout);
    find(library, "agclose", gvc.close);
    find(library, "gvFreeContext", gvc.freeContext);
    return gvc;
  }();
  return loaded;
}

} // namespace

std::string layoutSvg(const std::string &dot) {
  const Gvc &g = gvc();
  GVC_t *context = g.context();
  Agraph_t *graph = g.read(dot.c_str());
  if (!graph) {
    g.freeContext(context);
    throw Error("Graphviz could not read the graph tlc report made");
  }
  char *data = nullptr;
  unsigned length = 0;
  bool laidOut = g.layout(context, graph, "dot") == 0;
  bool rendered = laidOut && g.render(context, graph, "svg", &data, &length) == 0;
  std::string svg = rendered && data ? std::string(data, length) : "";
  if (data) g.freeRender(data);
  if (laidOut) g.freeLayout(context, graph);
  g.close(graph);
  g.freeContext(context);
  if (!rendered) throw Error("Graphviz could not lay out the graph tlc report made");
  return svg;
}

} // namespace tlc
