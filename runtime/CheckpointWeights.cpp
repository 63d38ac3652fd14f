#include "runtime/CheckpointWeights.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>

#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/MemoryBudget.h"
#include "runtime/ParameterShapes.h"
#include "runtime/Safetensors.h"
#include "runtime/StrictJson.h"

namespace tlc {
namespace {

constexpr const char *kSingleFile = "model.safetensors";
constexpr const char *kIndexFile = "model.safetensors.index.json";

// The index's weight_map: tensor key -> shard file name (a plain name in the directory).
std::map<std::string, std::string> readWeightMap(const std::string &path) {
  nlohmann::json index = readStrictJsonFile(path, "checkpoint index");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(fmt::format("{}: expected an object with a \"weight_map\" object", path));
  std::map<std::string, std::string> shards;
  for (const auto &[key, value] : index["weight_map"].items()) {
    std::string name = value.is_string() ? value.get<std::string>() : "";
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      throw Error(fmt::format("{}: tensor '{}' maps to {}, expected a file name in the checkpoint's directory",
                              path, key, value.dump()));
    shards[key] = name;
  }
  return shards;
}

bool exists(const std::string &path) { return inputFileProblem(path).empty(); }

// The shards, each mapped and its header checked once, and where each key lies.
struct OpenShards {
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<std::unique_ptr<SafetensorsView>> views;
  std::map<std::string, std::pair<const SafetensorsView *, const SafetensorsView::Entry *>> tensors;
};

OpenShards openShards(const std::string &directory, const std::vector<Parameter> &parameters) {
  OpenShards open;
  std::map<std::string, const SafetensorsView *> byFile;
  auto view = [&](const std::string &name) {
    if (auto found = byFile.find(name); found != byFile.end()) return found->second;
    std::string path = directory + "/" + name;
    open.files.push_back(std::make_unique<MappedFile>(path, "checkpoint shard"));
    open.views.push_back(std::make_unique<SafetensorsView>(open.files.back()->data(), open.files.back()->size(), path));
    return byFile[name] = open.views.back().get();
  };
  std::string indexPath = directory + "/" + kIndexFile;
  if (!exists(indexPath)) {
    const SafetensorsView *single = view(kSingleFile);
    for (const SafetensorsView::Entry &entry : single->entries()) open.tensors[entry.key] = {single, &entry};
    return open;
  }
  std::map<std::string, std::string> shards = readWeightMap(indexPath);
  for (const Parameter &parameter : parameters) {
    auto shard = shards.find(parameter.key);
    if (shard == shards.end()) continue;  // named as missing with the others
    const SafetensorsView *file = view(shard->second);
    const SafetensorsView::Entry *entry = file->find(parameter.key);
    if (!entry)
      throw Error(fmt::format("{}: '{}' is listed in shard '{}', which does not hold it", indexPath, parameter.key,
                              shard->second));
    open.tensors[parameter.key] = {file, entry};
  }
  return open;
}

} // namespace

std::vector<std::string> checkpointWeightFiles(const std::string &directory) {
  std::string indexPath = directory + "/" + kIndexFile;
  if (exists(indexPath)) {
    std::vector<std::string> files;
    for (const auto &[key, name] : readWeightMap(indexPath))
      if (std::find(files.begin(), files.end(), name) == files.end()) files.push_back(name);
    return files;
  }
  if (exists(directory + "/" + kSingleFile)) return {kSingleFile};
  std::string hint = exists(directory + "/pytorch_model.bin")
                         ? " (pytorch_model.bin is a pickle, which tlc does not read: save with safe_serialization=True)"
                         : "";
  throw Error(fmt::format("checkpoint '{}' has neither {} nor {}{}", directory, kSingleFile, kIndexFile, hint));
}

Weights loadCheckpointWeights(const std::string &directory, const std::vector<Parameter> &parameters) {
  checkpointWeightFiles(directory);  // says which file is missing, before any is opened
  OpenShards open = openShards(directory, parameters);
  checkParameterShapes(parameters, fmt::format("checkpoint '{}'", directory),
                       [&](const std::string &key) -> const std::vector<int64_t> * {
                         auto found = open.tensors.find(key);
                         return found == open.tensors.end() ? nullptr : &found->second.second->shape;
                       });
  int64_t bytes = 0;
  for (const Parameter &parameter : parameters)
    bytes = checkedAdd(bytes, SafetensorsView::decodedBytes(*open.tensors.at(parameter.key).second))
                .value_or(std::numeric_limits<int64_t>::max());
  MemoryBudget(fmt::format("checkpoint '{}'", directory))
      .need(fmt::format("{} tensors as f32", parameters.size()), bytes)
      .check();
  Weights weights;
  for (const Parameter &parameter : parameters) {
    const auto &[view, entry] = open.tensors.at(parameter.key);
    weights.set(parameter.key, view->decode(*entry));
  }
  return weights;
}

} // namespace tlc
