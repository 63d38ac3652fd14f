// Hugging Face checkpoints (--checkpoint): a directory written here as `save_pretrained`
// writes one (config.json, model.safetensors or shards with their index) builds the graph
// from its config and loads its weights by name; the forward matches the fp64 reference
// computed the Hugging Face way (rotate_half RoPE), and what tlc cannot build is refused
// by name.
#include "ReferenceModel.h"
#include "TestSupport.h"
#include "tests/unit/runtime/TestUtil.h"

#include "models/CheckpointModel.h"
#include "models/HfConfig.h"
#include "runtime/Backend.h"
#include "runtime/CheckpointWeights.h"
#include "runtime/OutputFile.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

using namespace tlc;
using namespace tlc::reference;
using tlc::test::errorMessage;

namespace {

// The shape every test writes: GQA (4 query heads over 2), two layers, an lm_head.
nlohmann::json smallConfigJson() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 32},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"intermediate_size", 48}, {"vocab_size", 61}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500.0},
          {"rope_scaling", nullptr}, {"tie_word_embeddings", false}, {"bos_token_id", 1}, {"eos_token_id", 2},
          {"max_position_embeddings", 64}, {"hidden_act", "silu"}, {"attention_bias", false},
          {"torch_dtype", "float32"}, {"transformers_version", "4.57.1"}, {"initializer_range", 0.02}};
}

// The same model as the reference computes it: Hugging Face's RoPE rotates halves.
LlamaConfig hfMath(const nlohmann::json &json) {
  LlamaConfig c;
  c.vocab = json["vocab_size"], c.hidden = json["hidden_size"], c.layers = json["num_hidden_layers"];
  c.heads = json["num_attention_heads"], c.kvHeads = json["num_key_value_heads"];
  c.headDim = c.hidden / c.heads, c.ffn = json["intermediate_size"];
  c.eps = json["rms_norm_eps"], c.ropeTheta = json["rope_theta"], c.tiedEmbedding = json["tie_word_embeddings"];
  c.ropeStyle = "half";
  return c;
}

// Seeded weights for the config's parameters, larger than the init's 0.02 so each block
// changes the residual stream.
Weights randomWeights(const std::vector<Parameter> &parameters, uint64_t seed) {
  Weights weights = Weights::random(parameters, seed);
  for (const Parameter &p : parameters) {
    Tensor t = weights.at(p.key);
    for (float &v : t.data) v = p.init == "normal" ? v * 5.0f : v + float(t.data.size() % 7) * 0.01f;
    weights.set(p.key, t);
  }
  return weights;
}

struct Loaded {
  Program program;
  Weights weights;
};

// What tlc --checkpoint does: config.json -> graph -> O`level` forward, weights by name.
Loaded loadCheckpoint(const std::string &directory, int level, int64_t batch, int64_t seq) {
  auto context = support::makeContext();
  llvm::SourceMgr sourceMgr;
  HfConfig config = readHfConfig(directory);
  auto module = buildCheckpointModule(*context, config, directory, sourceMgr);
  EXPECT_TRUE(module);
  CompileOptions options{level, batch, seq, "f32"};
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options)));
  auto program = buildProgram(*module, options);
  EXPECT_TRUE(mlir::succeeded(program));
  Weights weights = loadCheckpointWeights(directory, program->parameters);
  return {std::move(*program), std::move(weights)};
}

// The parameters of a config's model (the keys a checkpoint of it holds).
std::vector<Parameter> parametersOf(const nlohmann::json &json) {
  LlamaConfig config = parseHfConfig(json.dump(), "config.json", "test").model;
  return support::compileConfig(config, {0, 1, 4, "f32"}).parameters;
}

void writeText(const std::string &path, const std::string &text) { writeFileAtomically(path, text, "test file"); }

// `weights` split over `shards` safetensors files and an index, as save_pretrained shards.
void writeShards(const test::TempDir &directory, const Weights &weights, DType dtype, int shards) {
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  std::vector<Weights> parts(static_cast<size_t>(shards));
  int i = 0;
  for (const auto &[key, tensor] : weights.all()) {
    int shard = i++ % shards;
    parts[size_t(shard)].set(key, tensor);
    index["weight_map"][key] = fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, shards);
  }
  for (int s = 0; s < shards; ++s)
    parts[size_t(s)].saveSafetensors(directory.file(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards)),
                                     dtype);
  writeText(directory.file("model.safetensors.index.json"), index.dump(2));
}

double forwardError(const Loaded &loaded, const LlamaConfig &math, const Weights &expected, int64_t batch, int64_t seq,
                    uint64_t seed) {
  std::vector<int32_t> ids = randomTokenIds(loaded.program, seed);
  auto backend = createCpuBackend(2);
  backend->load(loaded.program, loaded.weights);
  ForwardResult result = backend->forward(ids);
  Forward ref = reference::forward(math, toDouble(expected), ids, batch, seq);
  return relativeErrorTo(result.logits.data, ref.logits);
}

uint64_t testSeed() { return ::testing::UnitTest::GetInstance()->random_seed() + 11; }

TEST(Checkpoint, ForwardMatchesTheReferenceWithHuggingFacesRope) {
  test::TempDir directory;
  nlohmann::json config = smallConfigJson();
  writeText(directory.file("config.json"), config.dump(2));
  Weights weights = randomWeights(parametersOf(config), testSeed());
  weights.saveSafetensors(directory.file("model.safetensors"));
  const int64_t batch = 2, seq = 9;
  for (int level : {0, 2}) {
    Loaded loaded = loadCheckpoint(directory.file(""), level, batch, seq);
    EXPECT_LE(forwardError(loaded, hfMath(config), weights, batch, seq, testSeed()), 1e-5) << "O" << level;
    // The test tells RoPE conventions apart: the same weights rotated as adjacent pairs
    // (tlc's workshop convention) give other logits.
    LlamaConfig adjacent = hfMath(config);
    adjacent.ropeStyle = "adjacent";
    EXPECT_GT(forwardError(loaded, adjacent, weights, batch, seq, testSeed()), 1e-2) << "O" << level;
  }
}

TEST(Checkpoint, ShardedBf16WeightsAreWidenedOnLoad) {
  test::TempDir directory;
  nlohmann::json config = smallConfigJson();
  config["tie_word_embeddings"] = true;  // and no lm_head in the files
  writeText(directory.file("config.json"), config.dump(2));
  Weights weights = randomWeights(parametersOf(config), testSeed());
  writeShards(directory, weights, DType::BF16, 3);
  EXPECT_EQ(checkpointWeightFiles(directory.file("")).size(), 3u);

  Weights rounded;
  for (const auto &[key, tensor] : weights.all()) {
    Tensor t = tensor;
    for (float &v : t.data) v = bf16ToFloat(floatToBf16(v));
    rounded.set(key, t);
  }
  const int64_t batch = 1, seq = 7;
  Loaded loaded = loadCheckpoint(directory.file(""), 1, batch, seq);
  EXPECT_FALSE(loaded.weights.contains("lm_head.weight"));
  for (const auto &[key, tensor] : rounded.all()) EXPECT_EQ(loaded.weights.at(key).data, tensor.data) << key;
  EXPECT_LE(forwardError(loaded, hfMath(config), rounded, batch, seq, testSeed()), 1e-5);
}

TEST(Checkpoint, ConfigFieldsAreReadAsTransformersWritesThem) {
  nlohmann::json json = smallConfigJson();
  json.erase("rope_theta");
  json.erase("rope_scaling");
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1234.5}};  // transformers 5
  json["eos_token_id"] = {2, 7};
  json.erase("num_key_value_heads");  // then every head has its own k and v
  json["sliding_window_pattern"] = 4;
  HfConfig config = parseHfConfig(json.dump(), "config.json", "tiny");
  EXPECT_EQ(config.model.name, "tiny");
  EXPECT_EQ(config.model.ropeTheta, 1234.5);
  EXPECT_EQ(config.model.ropeStyle, "half");
  EXPECT_EQ(config.model.kvHeads, 4);
  EXPECT_EQ(config.model.headDim, 8);
  EXPECT_EQ(config.model.maxSeqLen, 64);
  EXPECT_EQ(config.bos, 1);
  EXPECT_EQ(config.eos, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(config.unknown, (std::vector<std::string>{"sliding_window_pattern"}));
}

// Each field tlc does not build is named, with what it holds.
TEST(Checkpoint, RefusesWhatItCannotBuildByName) {
  auto problem = [](const std::function<void(nlohmann::json &)> &edit) {
    nlohmann::json json = smallConfigJson();
    edit(json);
    return errorMessage([&] { parseHfConfig(json.dump(), "ckpt/config.json", "m"); });
  };
  EXPECT_CONTAINS(problem([](auto &j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; }),
                  "ckpt/config.json: 'rope_scaling' has rope_type 'llama3'");
  EXPECT_CONTAINS(problem([](auto &j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }),
                  "'rope_scaling' has rope_type 'linear'");
  EXPECT_CONTAINS(problem([](auto &j) { j["hidden_act"] = "gelu"; }), "'hidden_act' is 'gelu'");
  EXPECT_CONTAINS(problem([](auto &j) { j["attention_bias"] = true; }), "'attention_bias' is true");
  EXPECT_CONTAINS(problem([](auto &j) { j["mlp_bias"] = true; }), "'mlp_bias' is true");
  EXPECT_CONTAINS(problem([](auto &j) { j["model_type"] = "mistral"; }), "'model_type' is 'mistral'");
  EXPECT_CONTAINS(problem([](auto &j) { j["quantization_config"] = {{"bits", 4}}; }), "'quantization_config'");
  EXPECT_CONTAINS(problem([](auto &j) { j.erase("hidden_size"); }), "'hidden_size' is missing");
  EXPECT_CONTAINS(problem([](auto &j) { j["num_attention_heads"] = 5; }), "heads (5) x head dim (6)");
  EXPECT_CONTAINS(problem([](auto &j) { j["head_dim"] = 16; }), "'head_dim' is 16");
  EXPECT_CONTAINS(problem([](auto &j) { j["vocab_size"] = "61"; }), "'vocab_size' is \"61\"");
  EXPECT_CONTAINS(problem([](auto &j) { j["eos_token_id"] = 61; }), "'eos_token_id' is 61, expected token ids 0 to 60");
  EXPECT_CONTAINS(problem([](auto &j) { j["rms_norm_eps"] = -1; }), "'rms_norm_eps' is -1");
}

TEST(Checkpoint, MissingOrMisplacedWeightsAreNamed) {
  test::TempDir directory;
  nlohmann::json config = smallConfigJson();
  writeText(directory.file("config.json"), config.dump());
  std::vector<Parameter> parameters = parametersOf(config);
  EXPECT_CONTAINS(errorMessage([&] { loadCheckpointWeights(directory.file(""), parameters); }),
                  "has neither model.safetensors nor model.safetensors.index.json");

  Weights weights = randomWeights(parameters, testSeed());
  Weights partial;
  for (const auto &[key, tensor] : weights.all())
    if (key != "model.layers.1.mlp.up_proj.weight") partial.set(key, tensor);
  partial.saveSafetensors(directory.file("model.safetensors"));
  EXPECT_CONTAINS(errorMessage([&] { loadCheckpointWeights(directory.file(""), parameters); }),
                  "missing 'model.layers.1.mlp.up_proj.weight' (expected shape 48x32)");

  writeShards(directory, weights, DType::F32, 2);
  nlohmann::json index = nlohmann::json::parse(R"({"weight_map": {"model.norm.weight": "../model.safetensors"}})");
  writeText(directory.file("model.safetensors.index.json"), index.dump());
  EXPECT_CONTAINS(errorMessage([&] { loadCheckpointWeights(directory.file(""), parameters); }),
                  "tensor 'model.norm.weight' maps to \"../model.safetensors\", expected a file name in the");
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  for (const auto &[key, tensor] : weights.all())
    if (key != "model.norm.weight") index["weight_map"][key] = "model-00001-of-00002.safetensors";
  writeText(directory.file("model.safetensors.index.json"), index.dump());
  std::string message = errorMessage([&] { loadCheckpointWeights(directory.file(""), parameters); });
  EXPECT_CONTAINS(message, "is listed in shard 'model-00001-of-00002.safetensors', which does not hold it");
}

} // namespace
