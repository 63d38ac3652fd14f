#include "compiler/codegen/Emitter.h"

#include "compiler/Targets.h"
#include "compiler/codegen/EmitterSupport.h"
#include "compiler/codegen/Templates.h"
#include "runtime/Error.h"
#include "runtime/OutputFile.h"
#include "runtime/Tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sys/stat.h>

namespace tlc::codegen {

KernelSource::KernelSource(const Program &program, const KernelSpec &spec, const Machine &machine)
    : program_(program), spec_(spec), machine_(machine) {
  int inputs = 0, outputs = 0;
  for (const KernelParam &param : spec.params) {
    names_.names.push_back(param.output ? fmt::format("out{}", outputs++) : fmt::format("in{}", inputs++));
    names_.types.push_back(param.dtype == DType::BF16 ? "tl_bf16" : param.dtype == DType::I32 ? "int" : "float");
  }
}

bool KernelSource::constantArgument(int param) const {
  const Value *value = &this->value(param);
  while (value->storage == Storage::View) value = &program_.value(value->viewOf);
  return value->storage == Storage::Weight && program_.kind != ProgramKind::TrainStep;
}

std::string KernelSource::paramsStruct() const {
  std::string out = fmt::format("struct {}_params {{\n", entry());
  for (size_t i = 0; i < spec_.params.size(); ++i)
    out += fmt::format("  {}{} *{}{};\n", spec_.params[i].output ? "" : "const ", names_.types[i],
                       spec_.params[i].output ? "" : "TL_RESTRICT ", names_.names[i]);
  out += "  float *ws;      // per-launch workspace\n  unsigned *sync; // zeroed words a kernel leaves zeroed\n};\n";
  return out;
}

std::string KernelSource::entryPoint(const std::string &threads, const std::string &body,
                                     const std::vector<std::string> &extra, const std::string &attributes,
                                     const std::string &prefetch, const std::string &produce) const {
  // overrides.dependentsAtStart (an experiment): chained kernels let the next one launch at once.
  bool early = spec_.chained && machine_.overrides.dependentsAtStart;
  std::vector<std::string> params, fields;
  for (size_t i = 0; i < spec_.params.size(); ++i) {
    params.push_back(fmt::format("{}{} *{}{}", spec_.params[i].output ? "" : "const ", names_.types[i],
                                 spec_.params[i].output ? "" : "__restrict__ ", names_.names[i]));
    fields.push_back(names_.names[i]);
  }
  params.push_back("float *ws");
  params.push_back("unsigned *sync");
  fields.push_back("ws");
  fields.push_back("sync");
  params.insert(params.end(), extra.begin(), extra.end());
  std::vector<std::string> bodyParams{fmt::format("const {}_params &p", entry())}, bodyArgs{"p"};
  for (const std::string &parameter : extra) {
    bodyParams.push_back(parameter);
    bodyArgs.push_back(parameter.substr(parameter.find_last_of(" *&") + 1));
  }
  return fmt::format("TL_DEVICE void {0}_body({1}) {{\n{2}}}\n"
                     "TL_DEVICE void {0}_prefetch(const {0}_params &p, int thread, int threads) {{\n{9}}}\n"
                     "#if defined(TL_RING)\n"
                     "TL_DEVICE void {0}_produce(const {0}_params &p, int block, unsigned &produced) {{\n{10}}}\n"
                     "#endif\n"
                     "#if !defined(TL_PERSISTENT)\n"
                     "extern \"C\" __global__ void {3}__launch_bounds__({4})\n{0}({5}) {{\n  const {0}_params p{{{6}}};\n"
                     "{7}  {0}_body({8});\n}}\n#endif\n",
                     entry(), fmt::join(bodyParams, ", "), body, attributes.empty() ? "" : attributes + " ", threads,
                     fmt::join(params, ", "), fmt::join(fields, ", "), early ? "  tl_allow_dependents_at_start();\n" : "",
                     fmt::join(bodyArgs, ", "),
                     prefetch.empty() ? "  (void)p; (void)thread; (void)threads;\n" : prefetch,
                     produce.empty() ? "  (void)p; (void)block; (void)produced;\n" : produce);
}

std::string KernelSource::header(const std::string &what, const std::vector<std::string> &details) const {
  std::string out = fmt::format("// {}: {}\n", entry(), what);
  for (const std::string &line : details) out += "//   " + line + "\n";
  std::vector<std::string> args;
  for (size_t i = 0; i < spec_.params.size(); ++i) {
    const Value &v = program_.value(spec_.params[i].value);
    args.push_back(fmt::format("{} {}[{}]", names_.names[i], dtypeName(v.dtype), shapeString(v.shape)));
  }
  out += fmt::format("//   arguments: {}\n", fmt::join(args, ", "));
  if (spec_.chained)
    out += "//   chained: may start while the kernel before it finishes; reads its inputs after "
           "tl_wait_for_producers()\n";
  for (const std::string &line : spec_.provenance) out += "//   " + line + "\n";
  return out;
}

std::string KernelSource::prelude(const std::vector<std::string> &templates) const {
  std::vector<std::string> all = {"prelude.cuh", "elementwise_ops.cuh"};
  all.insert(all.end(), templates.begin(), templates.end());
  std::string early = spec_.chained && machine_.overrides.dependentsAtStart ? "#define TL_DEPENDENTS_AT_START 1\n" : "";
  return vendorPrelude() + early + assembleTemplates(all) + "// ---- end of templates ----\n\n";
}

std::string describe(const ElementRef &expr, const ParamNames &names,
                     const std::function<std::string(const ElementExpr &)> &accumulator) {
  auto inner = [&](const ElementRef &arg) { return describe(arg, names, accumulator); };
  switch (expr->kind) {
  case ElementExpr::Kind::Load: return names.names.at(size_t(expr->param));
  case ElementExpr::Kind::Accumulator: return accumulator ? accumulator(*expr) : "acc";
  case ElementExpr::Kind::Apply: {
    std::vector<std::string> args;
    for (const ElementRef &arg : expr->args) args.push_back(inner(arg));
    return fmt::format("{}({})", expr->op, fmt::join(args, ", "));
  }
  case ElementExpr::Kind::Rope:
    if (expr->positions >= 0) return fmt::format("rope_at({}, {})", inner(expr->args[0]), names.names.at(size_t(expr->positions)));
    return fmt::format("{}({})", expr->inverse ? "rope_grad" : "rope", inner(expr->args[0]));
  case ElementExpr::Kind::CausalMask:
    return fmt::format("{}({})", expr->inverse ? "causal_mask_grad" : "causal_mask", inner(expr->args[0]));
  }
  return "?";
}

EmittedKernel emitKernel(const Program &program, const KernelSpec &spec, const Machine &machine) {
  KernelSource source(program, spec, machine);
  return std::visit(
      [&](const auto &body) -> EmittedKernel {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, GemmSpec>) return emitGemm(source, body);
        else if constexpr (std::is_same_v<T, AttentionSpec>) return emitAttention(source, body);
        else if constexpr (std::is_same_v<T, AttentionGradSpec>) return emitAttentionGrad(source, body);
        else if constexpr (std::is_same_v<T, CacheAttentionSpec>) return emitCacheAttention(source, body);
        else if constexpr (std::is_same_v<T, OptimizerSpec>) return emitOptimizer(source, body);
        else if constexpr (std::is_same_v<T, RowSpec>) return emitRows(source, body);
        else return emitElementwise(source, body);
      },
      spec.body);
}

bool launchesApart(const Program &program, const KernelSpec &spec, const Machine &machine) {
  const auto *gemm = std::get_if<GemmSpec>(&spec.body);
  return gemm && gemmLaunchesApart(KernelSource(program, spec, machine), *gemm);
}

} // namespace tlc::codegen

namespace tlc {
namespace {

uint32_t fnv1a(const std::string &text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return uint32_t(hash ^ (hash >> 32));
}

} // namespace

// "6:5 %rmsnorm = tl.rmsnorm", "gradient of 8:5 %q_proj = tl.linear".
static std::string describeOrigin(const Program &program, const OpOrigin &origin) {
  const SourceOp &op = program.sourceOps.at(size_t(origin.op));
  const char *role = origin.role == OriginRole::Gradient     ? "gradient of "
                     : origin.role == OriginRole::Recomputes ? "recomputes "
                     : origin.role == OriginRole::Updates    ? "updates "
                                                             : "";
  return fmt::format("{}{}:{} {}", role, op.line, op.column, op.text);
}

// What a launch computes, up to its lines: each origin's role and op ("tl.rope").
static std::vector<std::string> originKinds(const Program &program, const Kernel &kernel) {
  std::vector<std::string> kinds;
  for (const OpOrigin &origin : kernel.origins) {
    const std::string &text = program.sourceOps.at(size_t(origin.op)).text;
    kinds.push_back(fmt::format("{} {}", originRoleName(origin.role), text.substr(text.rfind(' ') + 1)));
  }
  return kinds;
}

static std::string describeLaunch(const Program &program, size_t index) {
  int layer = program.kernels[index].layer;
  return fmt::format("launch {}, {}", index, layer < 0 ? "outside the blocks" : fmt::format("block {}", layer));
}

// Appends `items` to `lines` as one comma-separated list, wrapped, indented by `indent`.
static void appendWrapped(std::vector<std::string> &lines, const std::vector<std::string> &items,
                          const std::string &indent) {
  lines.push_back(indent);
  for (size_t i = 0; i < items.size(); ++i) {
    std::string item = items[i] + (i + 1 < items.size() ? "," : "");
    if (lines.back().size() > indent.size() && lines.back().size() + 1 + item.size() > 110) lines.push_back(indent);
    lines.back() += (lines.back().size() > indent.size() ? " " : "") + item;
  }
}

// The header's provenance lines for the kernels `launches`, which share one source: the
// first launch's model ops in full, then each launch that computes the same kinds of
// ops in the same order as a range of lines, any other in full.
static std::vector<std::string> provenanceLines(const Program &program, const std::vector<size_t> &launches) {
  std::string file = program.sourceFile.substr(program.sourceFile.find_last_of('/') + 1);
  std::vector<std::string> lines, same;
  std::vector<std::string> firstKinds = originKinds(program, program.kernels[launches.front()]);
  for (size_t n = 0; n < launches.size(); ++n) {
    const Kernel &kernel = program.kernels[launches[n]];
    if (n > 0 && !kernel.origins.empty() && originKinds(program, kernel) == firstKinds) {
      auto [low, high] = std::minmax_element(kernel.origins.begin(), kernel.origins.end(),
                                             [&](const OpOrigin &a, const OpOrigin &b) { return a.op < b.op; });
      same.push_back(fmt::format("{}-{} ({})", program.sourceOps[size_t(low->op)].line,
                                 program.sourceOps[size_t(high->op)].line, describeLaunch(program, launches[n])));
      continue;
    }
    lines.push_back(fmt::format("model ops ({} line:column), {}:", file, describeLaunch(program, launches[n])));
    std::vector<std::string> items;
    for (const OpOrigin &origin : kernel.origins) items.push_back(describeOrigin(program, origin));
    if (items.empty()) items.push_back("none");
    appendWrapped(lines, items, "  ");
  }
  if (!same.empty()) {
    lines.push_back("the same ops at lines:");
    appendWrapped(lines, same, "  ");
  }
  return lines;
}

std::vector<codegen::TaskPlan> emitHipKernels(Program &program, const std::vector<codegen::KernelSpec> &specs,
                                              const codegen::Machine &machine) {
  if (specs.size() != program.kernels.size())
    throw Error(fmt::format("code generation: {} kernel specs for {} kernels", specs.size(), program.kernels.size()));
  std::map<std::string, std::string> sourceOf;  // entry -> source, without provenance
  std::map<std::string, std::vector<size_t>> launchesOf;  // entry -> kernels
  std::vector<codegen::TaskPlan> plans;
  program.workspaceBytes = 0;
  for (size_t k = 0; k < specs.size(); ++k) {
    Kernel &kernel = program.kernels[k];
    codegen::KernelSpec spec = specs[k];
    if (spec.collective) {  // NCCL, RCCL or Gloo runs it
      plans.emplace_back();
      continue;
    }
    spec.provenance.clear();
    if (spec.chained && codegen::launchesApart(program, spec, machine)) spec.chained = false;
    // The source opens with what it was written for (the runtime checks it against the Program).
    codegen::TaskPlan tasks;
    auto emitSigned = [&] {
      codegen::EmittedKernel emitted = codegen::emitKernel(program, spec, machine);
      tasks = std::move(emitted.tasks);
      kernel.launch = std::move(emitted.launch);
      kernel.workspaceBytes = emitted.workspaceBytes;
      kernel.syncWords = emitted.syncWords;
      return kKernelSignaturePrefix + kernelSignature(program, kernel) + "\n" + emitted.source;
    };
    std::string source = emitSigned();
    auto found = sourceOf.find(spec.entry);
    if (found != sourceOf.end() && found->second != source) {
      // Same name, different code: keep names unique per distinct computation.
      spec.entry = fmt::format("{}_{:08x}", spec.entry, fnv1a(source));
      source = emitSigned();
    }
    sourceOf.emplace(spec.entry, source);
    launchesOf[spec.entry].push_back(k);
    kernel.entry = spec.entry;
    kernel.source = std::move(source);
    kernel.chained = spec.chained;
    program.workspaceBytes = std::max(program.workspaceBytes, kernel.workspaceBytes);
    plans.push_back(std::move(tasks));
  }
  // Each source again, its header naming the model ops of every launch of it.
  for (const auto &[entry, launches] : launchesOf) {
    if (program.sourceOps.empty()) break;
    codegen::KernelSpec spec = specs[launches.front()];
    spec.entry = entry;
    spec.chained = program.kernels[launches.front()].chained;
    spec.provenance = provenanceLines(program, launches);
    std::string source = codegen::emitKernel(program, spec, machine).source;
    for (size_t k : launches)
      program.kernels[k].source = kKernelSignaturePrefix + kernelSignature(program, program.kernels[k]) + "\n" + source;
  }
  return plans;
}

int writeHipSources(const Program &program, const std::string &directory) {
  ::mkdir(directory.c_str(), 0777);
  std::set<std::string> written;
  // A persistent kernel, then its parts: each also runs as a launch of its own, and its
  // header names the model ops it computes.
  std::vector<const Kernel *> kernels;
  for (const Kernel &kernel : program.kernels) {
    kernels.push_back(&kernel);
    for (const Kernel &part : kernel.parts) kernels.push_back(&part);
  }
  for (const Kernel *kernel : kernels) {
    if (kernel->entry.empty() || !written.insert(kernel->entry).second) continue;
    std::string path = directory + "/" + kernel->entry + ".hip";
    writeFileAtomically(path, kernel->source, "kernel source");
  }
  return int(written.size());
}

} // namespace tlc
