// program.json: the Program as readable JSON, one line per value, parameter and op.
//
// Attributes carry a type tag so every AttrValue alternative round-trips exactly:
//   {"i": 3}  {"f": 1e-06}  {"s": "half"}  {"ints": [0, 2, 1, 3]}
// Non-finite floats are written as the strings "inf", "-inf" and "nan".
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/MemoryBudget.h"
#include "runtime/OutputFile.h"
#include "runtime/Program.h"
#include "runtime/StrictJson.h"

namespace tlc {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char *kFormatName = "tlc-program";
constexpr int64_t kMaxProgramFileBytes = int64_t(1) << 30;
constexpr int kFormatVersion = 1;

// ---- writing ---------------------------------------------------------------------

// Compact JSON with a space after ':' and ',' — one readable line.
void writeInline(std::ostringstream &out, const Json &json) {
  if (json.is_object()) {
    out << '{';
    bool first = true;
    for (const auto &item : json.items()) {
      out << (first ? "" : ", ") << Json(item.key()).dump() << ": ";
      writeInline(out, item.value());
      first = false;
    }
    out << '}';
  } else if (json.is_array()) {
    out << '[';
    for (size_t i = 0; i < json.size(); ++i) {
      out << (i ? ", " : "");
      writeInline(out, json[i]);
    }
    out << ']';
  } else {
    out << json.dump();
  }
}

std::string inlineJson(const Json &json) {
  std::ostringstream out;
  writeInline(out, json);
  return out.str();
}

Json attrToJson(const AttrValue &attr) {
  Json tagged = Json::object();
  if (const int64_t *integer = std::get_if<int64_t>(&attr)) {
    tagged["i"] = *integer;
  } else if (const double *real = std::get_if<double>(&attr)) {
    if (std::isnan(*real))
      tagged["f"] = "nan";
    else if (std::isinf(*real))
      tagged["f"] = *real > 0 ? "inf" : "-inf";
    else
      tagged["f"] = *real;
  } else if (const std::string *text = std::get_if<std::string>(&attr)) {
    tagged["s"] = *text;
  } else {
    tagged["ints"] = std::get<std::vector<int64_t>>(attr);
  }
  return tagged;
}

Json parameterToJson(const Parameter &parameter) {
  return Json{{"key", parameter.key}, {"shape", parameter.shape}, {"init", parameter.init}};
}

Json valueToJson(const Value &value) {
  Json json{{"id", value.id},
            {"name", value.name},
            {"dtype", dtypeName(value.dtype)},
            {"shape", value.shape},
            {"storage", storageName(value.storage)}};
  if (value.offset >= 0) json["offset"] = value.offset;
  if (value.storage == Storage::View || value.viewOf >= 0) json["view_of"] = value.viewOf;
  if (!value.weightKeys.empty()) json["weight_keys"] = value.weightKeys;
  if (!value.columnScaleKey.empty()) json["column_scale_key"] = value.columnScaleKey;
  return json;
}

Json opToJson(const OpRecord &op) {
  Json json{{"op", opKindName(op.kind)}, {"operands", op.operands}, {"results", op.results}};
  if (!op.attrs.empty()) {
    Json attrs = Json::object();
    for (const auto &[key, attr] : op.attrs) attrs[key] = attrToJson(attr);
    json["attrs"] = attrs;
  }
  return json;
}

// Kernel header fields on one line, then its ops one per line.
Json kernelHeader(const Kernel &kernel);

// A persistent kernel's parts (each with its ops), tasks and workers.
Json persistentToJson(const Kernel &kernel) {
  Json parts = Json::array();
  for (const Kernel &part : kernel.parts) {
    Json json = kernelHeader(part);
    Json ops = Json::array();
    for (const OpRecord &op : part.ops) ops.push_back(opToJson(op));
    json["ops"] = ops;
    parts.push_back(json);
  }
  Json tasks = Json::array();
  for (const Task &task : kernel.tasks) {
    Json writes = Json::array();
    for (const auto &[begin, end] : task.writes) writes.push_back(Json::array({begin, end}));
    tasks.push_back(Json{{"part", task.part}, {"block", task.block}, {"waits", task.waits}, {"writes", writes},
                         {"cost", task.cost}});
  }
  return Json{{"task_path", kernel.taskPath},
              {"parts", parts},
              {"tasks", tasks},
              {"workers", kernel.workers},
              {"part_workspace_offsets", kernel.partWorkspaceOffsets},
              {"part_sync_offsets", kernel.partSyncOffsets}};
}

Json kernelHeader(const Kernel &kernel) {
  Json header{{"name", kernel.name},     {"layer", kernel.layer},
              {"flops", kernel.flops},   {"min_bytes", kernel.minBytes},
              {"inputs", kernel.inputs}, {"outputs", kernel.outputs}};
  if (!kernel.origins.empty()) {
    Json origins = Json::array();
    for (const OpOrigin &origin : kernel.origins) origins.push_back(Json{origin.op, originRoleName(origin.role)});
    header["origins"] = origins;
  }
  if (!kernel.entry.empty()) {
    header["entry"] = kernel.entry;
    Json launch = Json::object();
    for (const auto &[backend, shape] : kernel.launch) {
      launch[backend] = Json{{"grid_blocks", shape.gridBlocks},
                             {"block_threads", shape.blockThreads},
                             {"shared_bytes", shape.sharedBytes}};
      if (!shape.bf16PartsInputs.empty()) launch[backend]["bf16_parts_inputs"] = shape.bf16PartsInputs;
    }
    header["launch"] = launch;
    header["chained"] = kernel.chained;
    header["workspace_bytes"] = kernel.workspaceBytes;
    header["sync_words"] = kernel.syncWords;
  }
  if (!kernel.parts.empty()) header["persistent"] = persistentToJson(kernel);
  return header;
}

void writeKernel(std::ostringstream &out, const Kernel &kernel) {
  std::string headerText = inlineJson(kernelHeader(kernel));
  headerText.pop_back(); // reopen the object to append "ops"
  out << "    " << headerText << ", \"ops\": [\n";
  for (size_t i = 0; i < kernel.ops.size(); ++i)
    out << "      " << inlineJson(opToJson(kernel.ops[i]))
        << (i + 1 < kernel.ops.size() ? ",\n" : "\n");
  out << "    ]}";
}

template <typename T, typename Writer>
void writeList(std::ostringstream &out, const char *key, const std::vector<T> &items,
               Writer writeItem, bool last = false) {
  out << "  " << Json(key).dump() << ": [";
  for (size_t i = 0; i < items.size(); ++i) {
    out << (i ? ",\n" : "\n");
    writeItem(items[i]);
  }
  out << (items.empty() ? "]" : "\n  ]") << (last ? "\n" : ",\n");
}

// ---- reading ---------------------------------------------------------------------

// Reads fields with messages that name the file and the path inside it.
class JsonReader {
public:
  explicit JsonReader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string &where, const std::string &message) const {
    throw Error(
        fmt::format("program '{}': {}{}{}", origin_, where, where.empty() ? "" : ": ", message));
  }

  const nlohmann::json &field(const nlohmann::json &object, const char *key,
                              const std::string &where) const {
    if (!object.is_object())
      fail(where, fmt::format("expected an object, got {}", object.type_name()));
    auto found = object.find(key);
    if (found == object.end()) fail(where, fmt::format("missing field '{}'", key));
    return *found;
  }

  const nlohmann::json *optionalField(const nlohmann::json &object, const char *key) const {
    auto found = object.find(key);
    return found == object.end() ? nullptr : &*found;
  }

  int64_t integer(const nlohmann::json &json, const std::string &where) const {
    if (json.is_number_integer()) return json.get<int64_t>();
    if (json.is_number_unsigned()) {
      uint64_t raw = json.get<uint64_t>();
      if (raw <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(raw);
    }
    fail(where, fmt::format("expected an integer, got {}", json.dump()));
  }

  int64_t integer(const nlohmann::json &object, const char *key, const std::string &where) const {
    return integer(field(object, key, where), join(where, key));
  }

  double number(const nlohmann::json &json, const std::string &where) const {
    if (json.is_number()) return json.get<double>();
    if (json.is_string()) {
      const std::string &text = json.get_ref<const std::string &>();
      if (text == "inf") return std::numeric_limits<double>::infinity();
      if (text == "-inf") return -std::numeric_limits<double>::infinity();
      if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    fail(where, fmt::format("expected a number, got {}", json.dump()));
  }

  std::string string(const nlohmann::json &json, const std::string &where) const {
    if (!json.is_string()) fail(where, fmt::format("expected a string, got {}", json.dump()));
    return json.get<std::string>();
  }

  std::string string(const nlohmann::json &object, const char *key,
                     const std::string &where) const {
    return string(field(object, key, where), join(where, key));
  }

  const nlohmann::json &array(const nlohmann::json &json, const std::string &where) const {
    if (!json.is_array()) fail(where, fmt::format("expected an array, got {}", json.type_name()));
    return json;
  }

  const nlohmann::json &array(const nlohmann::json &object, const char *key,
                              const std::string &where) const {
    return array(field(object, key, where), join(where, key));
  }

  std::vector<int64_t> integers(const nlohmann::json &json, const std::string &where) const {
    std::vector<int64_t> result;
    array(json, where);
    for (size_t i = 0; i < json.size(); ++i)
      result.push_back(integer(json[i], fmt::format("{}[{}]", where, i)));
    return result;
  }

  std::vector<int64_t> integers(const nlohmann::json &object, const char *key,
                                const std::string &where) const {
    return integers(field(object, key, where), join(where, key));
  }

  // An integer field stored in an `int`: out of range is an error, never truncated.
  int intField(const nlohmann::json &object, const char *key, const std::string &where) const {
    return narrow(integer(object, key, where), join(where, key));
  }

  int narrow(int64_t value, const std::string &where) const {
    if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
      fail(where, fmt::format("{} is out of range", value));
    return int(value);
  }

  std::vector<int> ids(const nlohmann::json &object, const char *key,
                       const std::string &where) const {
    return ids(field(object, key, where), join(where, key));
  }

  std::vector<int> ids(const nlohmann::json &json, const std::string &where) const {
    std::vector<int> result;
    std::vector<int64_t> values = integers(json, where);
    for (size_t i = 0; i < values.size(); ++i) result.push_back(narrow(values[i], fmt::format("{}[{}]", where, i)));
    return result;
  }

  static std::string join(const std::string &where, const std::string &key) {
    return where.empty() ? key : where + "." + key;
  }

  // Runs `parse` and prefixes any tlc::Error from enum parsing with the location.
  template <typename F> auto located(const std::string &where, F parse) const {
    try {
      return parse();
    } catch (const Error &error) {
      fail(where, error.what());
    }
  }

private:
  std::string origin_;
};

AttrValue attrFromJson(const JsonReader &reader, const nlohmann::json &json,
                       const std::string &where) {
  if (!json.is_object() || json.size() != 1)
    reader.fail(where, fmt::format("expected an attribute like {{\"i\": 1}}, {{\"f\": 1.5}}, "
                                   "{{\"s\": \"x\"}} or {{\"ints\": [1, 2]}}, got {}",
                                   json.dump()));
  const std::string &tag = json.begin().key();
  const nlohmann::json &payload = json.begin().value();
  std::string payloadWhere = JsonReader::join(where, tag);
  if (tag == "i") return reader.integer(payload, payloadWhere);
  if (tag == "f") return reader.number(payload, payloadWhere);
  if (tag == "s") return reader.string(payload, payloadWhere);
  if (tag == "ints") return reader.integers(payload, payloadWhere);
  reader.fail(where, fmt::format("unknown attribute tag '{}' (expected i, f, s or ints)", tag));
}

Parameter parameterFromJson(const JsonReader &reader, const nlohmann::json &json,
                            const std::string &where) {
  Parameter parameter;
  parameter.key = reader.string(json, "key", where);
  parameter.shape = reader.integers(json, "shape", where);
  parameter.init = reader.string(json, "init", where);
  return parameter;
}

SourceOp sourceOpFromJson(const JsonReader &reader, const nlohmann::json &json, const std::string &where) {
  SourceOp op;
  op.line = reader.intField(json, "line", where);
  op.column = reader.intField(json, "column", where);
  op.text = reader.string(json, "text", where);
  return op;
}

Value valueFromJson(const JsonReader &reader, const nlohmann::json &json,
                    const std::string &where) {
  Value value;
  value.id = reader.intField(json, "id", where);
  value.name = reader.string(json, "name", where);
  std::string dtype = reader.string(json, "dtype", where);
  value.dtype = reader.located(JsonReader::join(where, "dtype"), [&] { return parseDType(dtype); });
  value.shape = reader.integers(json, "shape", where);
  std::string storage = reader.string(json, "storage", where);
  value.storage =
      reader.located(JsonReader::join(where, "storage"), [&] { return parseStorage(storage); });
  if (reader.optionalField(json, "offset")) value.offset = reader.integer(json, "offset", where);
  if (value.storage == Storage::View)
    value.viewOf = reader.intField(json, "view_of", where);
  else if (reader.optionalField(json, "view_of"))
    value.viewOf = reader.intField(json, "view_of", where);
  if (const nlohmann::json *keys = reader.optionalField(json, "weight_keys")) {
    std::string keysWhere = JsonReader::join(where, "weight_keys");
    reader.array(*keys, keysWhere);
    for (size_t i = 0; i < keys->size(); ++i)
      value.weightKeys.push_back(reader.string((*keys)[i], fmt::format("{}[{}]", keysWhere, i)));
  } else if (value.storage == Storage::Weight) {
    reader.field(json, "weight_keys", where); // reports the missing field
  }
  if (reader.optionalField(json, "column_scale_key"))
    value.columnScaleKey = reader.string(json, "column_scale_key", where);
  return value;
}

OpRecord opFromJson(const JsonReader &reader, const nlohmann::json &json,
                    const std::string &where) {
  OpRecord op;
  std::string name = reader.string(json, "op", where);
  op.kind = reader.located(JsonReader::join(where, "op"), [&] { return parseOpKind(name); });
  op.operands = reader.ids(json, "operands", where);
  op.results = reader.ids(json, "results", where);
  if (const nlohmann::json *attrs = reader.optionalField(json, "attrs")) {
    std::string attrsWhere = JsonReader::join(where, "attrs");
    if (!attrs->is_object()) reader.fail(attrsWhere, "expected an object");
    for (const auto &item : attrs->items())
      op.attrs[item.key()] =
          attrFromJson(reader, item.value(), JsonReader::join(attrsWhere, item.key()));
  }
  return op;
}

void persistentFromJson(const JsonReader &reader, const nlohmann::json &json, const std::string &where,
                        Kernel &kernel);

Kernel kernelFromJson(const JsonReader &reader, const nlohmann::json &json,
                      const std::string &where) {
  Kernel kernel;
  kernel.name = reader.string(json, "name", where);
  kernel.inputs = reader.ids(json, "inputs", where);
  kernel.outputs = reader.ids(json, "outputs", where);
  if (reader.optionalField(json, "layer")) kernel.layer = reader.intField(json, "layer", where);
  if (reader.optionalField(json, "flops")) kernel.flops = reader.integer(json, "flops", where);
  if (reader.optionalField(json, "min_bytes"))
    kernel.minBytes = reader.integer(json, "min_bytes", where);
  if (reader.optionalField(json, "entry")) {
    kernel.entry = reader.string(json, "entry", where);
    std::string launchWhere = JsonReader::join(where, "launch");
    const nlohmann::json &launch = reader.field(json, "launch", where);
    if (!launch.is_object()) reader.fail(launchWhere, "expected an object of launch shapes by backend");
    for (auto item = launch.begin(); item != launch.end(); ++item) {
      std::string shapeWhere = JsonReader::join(launchWhere, item.key());
      KernelLaunch shape;
      shape.gridBlocks = reader.integer(item.value(), "grid_blocks", shapeWhere);
      shape.blockThreads = reader.intField(item.value(), "block_threads", shapeWhere);
      shape.sharedBytes = reader.integer(item.value(), "shared_bytes", shapeWhere);
      if (reader.optionalField(item.value(), "bf16_parts_inputs"))
        for (int64_t id : reader.integers(item.value(), "bf16_parts_inputs", shapeWhere)) {
          if (id < 0 || id > std::numeric_limits<int>::max())
            reader.fail(JsonReader::join(shapeWhere, "bf16_parts_inputs"), fmt::format("{} is not a value id", id));
          shape.bf16PartsInputs.push_back(int(id));
        }
      kernel.launch[item.key()] = shape;
    }
    const nlohmann::json &chained = reader.field(json, "chained", where);
    if (!chained.is_boolean()) reader.fail(JsonReader::join(where, "chained"), "expected true or false");
    kernel.chained = chained.get<bool>();
    kernel.workspaceBytes = reader.integer(json, "workspace_bytes", where);
    if (reader.optionalField(json, "sync_words")) kernel.syncWords = reader.integer(json, "sync_words", where);
  }
  if (const nlohmann::json *origins = reader.optionalField(json, "origins")) {
    std::string originsWhere = JsonReader::join(where, "origins");
    reader.array(*origins, originsWhere);
    for (size_t i = 0; i < origins->size(); ++i) {
      std::string itemWhere = fmt::format("{}[{}]", originsWhere, i);
      const nlohmann::json &item = (*origins)[i];
      if (!item.is_array() || item.size() != 2) reader.fail(itemWhere, "expected [source op, role]");
      std::string role = reader.string(item[1], itemWhere + "[1]");
      kernel.origins.push_back({reader.narrow(reader.integer(item[0], itemWhere + "[0]"), itemWhere + "[0]"),
                                reader.located(itemWhere + "[1]", [&] { return parseOriginRole(role); })});
    }
  }
  const nlohmann::json &ops = reader.array(json, "ops", where);
  for (size_t i = 0; i < ops.size(); ++i)
    kernel.ops.push_back(opFromJson(reader, ops[i], fmt::format("{}.ops[{}]", where, i)));
  if (const nlohmann::json *persistent = reader.optionalField(json, "persistent"))
    persistentFromJson(reader, *persistent, JsonReader::join(where, "persistent"), kernel);
  return kernel;
}

void persistentFromJson(const JsonReader &reader, const nlohmann::json &json, const std::string &where,
                        Kernel &kernel) {
  kernel.taskPath = reader.string(json, "task_path", where);
  const nlohmann::json &parts = reader.array(json, "parts", where);
  for (size_t i = 0; i < parts.size(); ++i)
    kernel.parts.push_back(kernelFromJson(reader, parts[i], fmt::format("{}.parts[{}]", where, i)));
  const nlohmann::json &tasks = reader.array(json, "tasks", where);
  for (size_t i = 0; i < tasks.size(); ++i) {
    std::string at = fmt::format("{}.tasks[{}]", where, i);
    Task task;
    task.part = reader.intField(tasks[i], "part", at);
    task.block = reader.integer(tasks[i], "block", at);
    task.waits = reader.ids(tasks[i], "waits", at);
    const nlohmann::json &writes = reader.array(tasks[i], "writes", at);
    for (size_t w = 0; w < writes.size(); ++w) {
      std::vector<int64_t> range = reader.integers(writes[w], fmt::format("{}.writes[{}]", at, w));
      if (range.size() != 2) reader.fail(fmt::format("{}.writes[{}]", at, w), "expected [begin, end]");
      task.writes.push_back({range[0], range[1]});
    }
    task.cost = reader.number(reader.field(tasks[i], "cost", at), JsonReader::join(at, "cost"));
    kernel.tasks.push_back(std::move(task));
  }
  const nlohmann::json &workers = reader.array(json, "workers", where);
  for (size_t w = 0; w < workers.size(); ++w)
    kernel.workers.push_back(reader.ids(workers[w], fmt::format("{}.workers[{}]", where, w)));
  kernel.partWorkspaceOffsets = reader.integers(reader.field(json, "part_workspace_offsets", where),
                                                JsonReader::join(where, "part_workspace_offsets"));
  kernel.partSyncOffsets =
      reader.integers(reader.field(json, "part_sync_offsets", where), JsonReader::join(where, "part_sync_offsets"));
}

template <typename T, typename Parse>
std::vector<T> listFromJson(const JsonReader &reader, const nlohmann::json &root, const char *key,
                            Parse parse) {
  std::vector<T> items;
  const nlohmann::json &list = reader.array(root, key, "");
  for (size_t i = 0; i < list.size(); ++i)
    items.push_back(parse(reader, list[i], fmt::format("{}[{}]", key, i)));
  return items;
}

} // namespace

std::string programToJson(const Program &program) {
  std::ostringstream out;
  out << "{\n";
  Json header{{"format", kFormatName},        {"version", kFormatVersion},
              {"model", program.model},       {"opt_level", program.optLevel},
              {"pipeline", program.pipeline}, {"dtype", dtypeName(program.dtype)},
              {"batch", program.batch},       {"seq_len", program.seqLen},
              {"vocab", program.vocab},       {"arena_bytes", program.arenaBytes},
              {"inputs", program.inputs},     {"outputs", program.outputs}};
  // A forward is what a Program is unless it says otherwise: its files stay as they were.
  if (program.kind != ProgramKind::Forward) header["kind"] = programKindName(program.kind);
  if (!program.targetArch.empty())
    header["target"] = Json{{"arch", program.targetArch}, {"multiprocessors", program.targetMultiprocessors}};
  if (!program.scheduleOverrides.empty()) header["schedule_overrides"] = program.scheduleOverrides;
  if (!program.persistentFallback.empty()) header["persistent_fallback"] = program.persistentFallback;
  if (program.matmulPrecision != MatmulPrecision::Highest)
    header["matmul_precision"] = matmulPrecisionName(program.matmulPrecision);
  for (const auto &item : header.items())
    out << "  " << Json(item.key()).dump() << ": " << inlineJson(item.value()) << ",\n";
  if (!program.sourceOps.empty()) {
    out << "  \"source_file\": " << Json(program.sourceFile).dump() << ",\n";
    writeList(out, "source_ops", program.sourceOps, [&](const SourceOp &op) {
      out << "    " << inlineJson(Json{{"line", op.line}, {"column", op.column}, {"text", op.text}});
    });
  }
  writeList(out, "parameters", program.parameters,
            [&](const Parameter &p) { out << "    " << inlineJson(parameterToJson(p)); });
  writeList(out, "values", program.values,
            [&](const Value &v) { out << "    " << inlineJson(valueToJson(v)); });
  // GPU sources once per entry (kernels with one name share one source).
  Json sources = Json::object();
  for (const Kernel &kernel : program.kernels) {
    if (!kernel.entry.empty()) sources[kernel.entry] = kernel.source;
    for (const Kernel &part : kernel.parts)
      if (!part.entry.empty()) sources[part.entry] = part.source;
  }
  writeList(
      out, "kernels", program.kernels, [&](const Kernel &k) { writeKernel(out, k); },
      /*last=*/sources.empty());
  if (!sources.empty()) {
    out << "  \"workspace_bytes\": " << program.workspaceBytes << ",\n";
    out << "  \"sources\": {";
    bool first = true;
    for (const auto &item : sources.items()) {
      out << (first ? "\n" : ",\n") << "    " << Json(item.key()).dump() << ": "
          << item.value().dump();
      first = false;
    }
    out << "\n  }\n";
  }
  out << "}\n";
  return out.str();
}

Program programFromJson(const std::string &text, const std::string &origin) {
  JsonReader reader(origin);
  nlohmann::json root = reader.located("", [&] { return parseStrictJson(text); });
  if (!root.is_object()) reader.fail("", "expected a JSON object at the top level");
  if (const nlohmann::json *format = reader.optionalField(root, "format"))
    if (!format->is_string() || *format != kFormatName)
      reader.fail("format", fmt::format("expected \"{}\", got {}", kFormatName, format->dump()));
  if (reader.optionalField(root, "version")) {
    int64_t version = reader.integer(root, "version", "");
    if (version != kFormatVersion)
      reader.fail("version", fmt::format("unsupported program format version {} (this runtime "
                                         "reads version {})",
                                         version, kFormatVersion));
  }

  Program program;
  program.model = reader.string(root, "model", "");
  if (reader.optionalField(root, "kind")) {
    std::string kind = reader.string(root, "kind", "");
    program.kind = reader.located("kind", [&] { return parseProgramKind(kind); });
  }
  if (reader.optionalField(root, "matmul_precision")) {
    std::string precision = reader.string(root, "matmul_precision", "");
    program.matmulPrecision = reader.located("matmul_precision", [&] { return parseMatmulPrecision(precision); });
  }
  program.optLevel = reader.intField(root, "opt_level", "");
  if (const nlohmann::json *target = reader.optionalField(root, "target")) {
    program.targetArch = reader.string(*target, "arch", "target");
    int64_t multiprocessors = reader.integer(*target, "multiprocessors", "target");
    if (multiprocessors < 1 || multiprocessors > 65536)
      reader.fail("target.multiprocessors", fmt::format("expected a count of 1 to 65536, got {}", multiprocessors));
    program.targetMultiprocessors = int(multiprocessors);
  }
  if (reader.optionalField(root, "schedule_overrides"))
    program.scheduleOverrides = reader.string(root, "schedule_overrides", "");
  if (reader.optionalField(root, "persistent_fallback"))
    program.persistentFallback = reader.string(root, "persistent_fallback", "");
  program.pipeline = reader.string(root, "pipeline", "");
  std::string dtype = reader.string(root, "dtype", "");
  program.dtype = reader.located("dtype", [&] { return parseDType(dtype); });
  program.batch = reader.integer(root, "batch", "");
  program.seqLen = reader.integer(root, "seq_len", "");
  program.vocab = reader.integer(root, "vocab", "");
  program.arenaBytes = reader.integer(root, "arena_bytes", "");
  program.inputs = reader.ids(root, "inputs", "");
  program.outputs = reader.ids(root, "outputs", "");
  if (reader.optionalField(root, "source_ops")) {
    program.sourceFile = reader.string(root, "source_file", "");
    program.sourceOps = listFromJson<SourceOp>(reader, root, "source_ops", sourceOpFromJson);
  }
  program.parameters = listFromJson<Parameter>(reader, root, "parameters", parameterFromJson);
  program.values = listFromJson<Value>(reader, root, "values", valueFromJson);
  program.kernels = listFromJson<Kernel>(reader, root, "kernels", kernelFromJson);
  if (reader.optionalField(root, "workspace_bytes"))
    program.workspaceBytes = reader.integer(root, "workspace_bytes", "");
  if (const nlohmann::json *sources = reader.optionalField(root, "sources")) {
    auto sourceOf = [&](Kernel &kernel, const std::string &where) {
      if (kernel.entry.empty()) return;
      if (!sources->is_object() || !sources->contains(kernel.entry))
        reader.fail(where, fmt::format("no source for entry '{}' under \"sources\"", kernel.entry));
      kernel.source = reader.string((*sources)[kernel.entry], "sources." + kernel.entry);
    };
    for (size_t k = 0; k < program.kernels.size(); ++k) {
      Kernel &kernel = program.kernels[k];
      sourceOf(kernel, fmt::format("kernels[{}].entry", k));
      for (size_t p = 0; p < kernel.parts.size(); ++p)
        sourceOf(kernel.parts[p], fmt::format("kernels[{}].persistent.parts[{}].entry", k, p));
    }
  }
  reader.located("", [&] {
    validateProgram(program);
    return 0;
  });
  return program;
}

Program loadProgram(const std::string &path) {
  MappedFile file(path, "program file");
  // Parsed JSON takes several times the text's size: refuse what no Program needs.
  if (int64_t(file.size()) > kMaxProgramFileBytes)
    throw Error(fmt::format("program file '{}' is {}; a program is at most {}", path,
                            formatBytes(int64_t(file.size())), formatBytes(kMaxProgramFileBytes)));
  return programFromJson(std::string(file.text()), path);
}

void saveProgram(const Program &program, const std::string &path) {
  writeFileAtomically(path, programToJson(program), "program file");
}

} // namespace tlc
