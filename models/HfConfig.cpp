#include "models/HfConfig.h"

#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/StrictJson.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace tlc {
namespace {

// Fields that describe training, saving or the library, not the arithmetic of a forward.
const std::set<std::string> kHarmless = {
    "_name_or_path", "_attn_implementation_autoset", "architectures", "attention_dropout", "dtype", "torch_dtype",
    "initializer_range", "pad_token_id", "pretraining_tp", "transformers_version", "use_cache", "return_dict",
    "output_attentions", "output_hidden_states", "torchscript", "use_bfloat16", "tokenizer_class", "id2label",
    "label2id", "problem_type", "is_decoder", "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder",
    "chunk_size_feed_forward", "task_specific_params", "finetuning_task", "prefix", "sep_token_id",
    "decoder_start_token_id", "pruned_heads", "tf_legacy_loss", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "temperature", "top_k", "top_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "num_return_sequences", "bad_words_ids", "diversity_penalty", "num_beam_groups",
    "typical_p", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "output_scores",
    "return_dict_in_generate", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "encoder_no_repeat_ngram_size", "cross_attention_hidden_size"};

// Reads fields of one JSON object, remembering which were read, and says what is wrong
// with a field as "<origin>: '<field>' ...".
class ConfigFields {
public:
  ConfigFields(const nlohmann::json &json, std::string origin) : json_(json), origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string &field, const std::string &problem) const {
    throw Error(fmt::format("{}: '{}' {}", origin_, field, problem));
  }

  const nlohmann::json *find(const std::string &field) {
    read_.insert(field);
    auto found = json_.find(field);
    return found == json_.end() ? nullptr : &*found;
  }

  // A whole number in [min, max]; `fallback` when absent (none: the field is required).
  int64_t integer(const std::string &field, int64_t min, int64_t max, std::optional<int64_t> fallback = {}) {
    const nlohmann::json *value = find(field);
    if (!value || value->is_null()) {
      if (!fallback) fail(field, "is missing: tlc needs it to build the model");
      return *fallback;
    }
    if (!value->is_number_integer() || value->get<int64_t>() < min || value->get<int64_t>() > max)
      fail(field, fmt::format("is {}, expected a whole number {} to {}", value->dump(), min, max));
    return value->get<int64_t>();
  }

  double positive(const std::string &field, double fallback) {
    const nlohmann::json *value = find(field);
    if (!value || value->is_null()) return fallback;
    if (!value->is_number() || !(value->get<double>() > 0) || !std::isfinite(value->get<double>()))
      fail(field, fmt::format("is {}, expected a positive number", value->dump()));
    return value->get<double>();
  }

  bool flag(const std::string &field, bool fallback) {
    const nlohmann::json *value = find(field);
    if (!value || value->is_null()) return fallback;
    if (!value->is_boolean()) fail(field, fmt::format("is {}, expected true or false", value->dump()));
    return value->get<bool>();
  }

  std::string text(const std::string &field, const std::string &fallback) {
    const nlohmann::json *value = find(field);
    if (!value || value->is_null()) return fallback;
    if (!value->is_string()) fail(field, fmt::format("is {}, expected a string", value->dump()));
    return value->get<std::string>();
  }

  // Token ids: absent, null, one id or a list of ids, each below `vocab`.
  std::vector<int32_t> tokenIds(const std::string &field, int64_t vocab) {
    const nlohmann::json *value = find(field);
    std::vector<int32_t> ids;
    if (!value || value->is_null()) return ids;
    nlohmann::json list = value->is_array() ? *value : nlohmann::json::array({*value});
    for (const nlohmann::json &id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
        fail(field, fmt::format("is {}, expected token ids 0 to {} (vocab_size - 1)", value->dump(), vocab - 1));
      ids.push_back(int32_t(id.get<int64_t>()));
    }
    return ids;
  }

  // The fields never read and not known to be harmless.
  std::vector<std::string> unread() const {
    std::vector<std::string> fields;
    for (const auto &item : json_.items())
      if (!read_.count(item.key()) && !kHarmless.count(item.key())) fields.push_back(item.key());
    return fields;
  }

private:
  const nlohmann::json &json_;
  std::string origin_;
  std::set<std::string> read_;
};

// What a Llama config must say for tlc's graph to be its model.
void checkSupported(ConfigFields &fields) {
  if (std::string type = fields.text("model_type", "llama"); type != "llama")
    fields.fail("model_type", fmt::format("is '{}': tlc builds Llama models (model_type 'llama')", type));
  if (const nlohmann::json *architectures = fields.find("architectures"); architectures && architectures->is_array()) {
    bool causal = false;
    for (const nlohmann::json &name : *architectures) causal = causal || name == "LlamaForCausalLM";
    if (!causal) fields.fail("architectures", fmt::format("is {}: tlc builds LlamaForCausalLM", architectures->dump()));
  }
  if (std::string act = fields.text("hidden_act", "silu"); act != "silu" && act != "swish")
    fields.fail("hidden_act", fmt::format("is '{}': tlc's MLP is SwiGLU, with silu", act));
  for (const char *bias : {"attention_bias", "mlp_bias"})
    if (fields.flag(bias, false)) fields.fail(bias, "is true: tlc's projections have no bias");
  if (fields.find("quantization_config"))
    fields.fail("quantization_config", "is set: tlc reads f32, bf16 and f16 weights, not quantized ones");
}

// A RoPE scaling (or transformers 5's rope_parameters) other than the plain one is refused by type.
void checkRopeKind(ConfigFields &fields, const std::string &field, const nlohmann::json &rope) {
  if (rope.is_null()) return;
  if (!rope.is_object()) fields.fail(field, fmt::format("is {}, expected an object or null", rope.dump()));
  std::string kind = "default";
  for (const char *key : {"type", "rope_type"})
    if (rope.contains(key)) {
      if (!rope[key].is_string()) fields.fail(field, fmt::format("has {} {}, expected a string", key, rope[key].dump()));
      kind = rope[key].get<std::string>();
    }
  if (kind != "default")
    fields.fail(field, fmt::format("has rope_type '{}': tlc's RoPE has no scaling (only 'default')", kind));
  for (const auto &item : rope.items())
    if (item.key() != "rope_type" && item.key() != "type" && item.key() != "rope_theta")
      fields.fail(field, fmt::format("has '{}', which tlc's RoPE does not take", item.key()));
}

double readRopeTheta(ConfigFields &fields) {
  double theta = fields.positive("rope_theta", 10000.0);
  if (const nlohmann::json *scaling = fields.find("rope_scaling")) checkRopeKind(fields, "rope_scaling", *scaling);
  if (const nlohmann::json *parameters = fields.find("rope_parameters")) {
    checkRopeKind(fields, "rope_parameters", *parameters);
    if (parameters->is_object() && parameters->contains("rope_theta")) {
      ConfigFields inner(*parameters, "rope_parameters");
      theta = inner.positive("rope_theta", theta);
    }
  }
  return theta;
}

LlamaConfig readShape(ConfigFields &fields, const std::string &name) {
  LlamaConfig c;
  c.name = name;
  c.vocab = fields.integer("vocab_size", 1, std::numeric_limits<int32_t>::max());
  c.hidden = fields.integer("hidden_size", 1, 65536);
  c.layers = fields.integer("num_hidden_layers", 1, 1024);
  c.heads = fields.integer("num_attention_heads", 1, 4096);
  c.kvHeads = fields.integer("num_key_value_heads", 1, 4096, c.heads);
  c.ffn = fields.integer("intermediate_size", 1, 1 << 20);
  c.headDim = c.hidden / c.heads;
  if (const nlohmann::json *given = fields.find("head_dim"); given && !given->is_null())
    if (int64_t headDim = fields.integer("head_dim", 1, 4096); headDim * c.heads != c.hidden)
      fields.fail("head_dim", fmt::format("is {}: tlc's heads split hidden_size {} into {} heads of {}", headDim,
                                          c.hidden, c.heads, c.hidden / c.heads));
  c.eps = fields.positive("rms_norm_eps", 1e-6);
  c.ropeTheta = readRopeTheta(fields);
  c.ropeStyle = "half";  // HF's rotate_half pairs dimension i with i + D/2
  c.tiedEmbedding = fields.flag("tie_word_embeddings", false);
  c.maxSeqLen = fields.integer("max_position_embeddings", 1, std::numeric_limits<int32_t>::max(), 2048);
  return c;
}

} // namespace

HfConfig parseHfConfig(const std::string &text, const std::string &origin, const std::string &name) {
  nlohmann::json json;
  try {
    json = parseStrictJson(text);
  } catch (const Error &error) {
    throw Error(fmt::format("{}: {}", origin, error.what()));
  }
  if (!json.is_object()) throw Error(fmt::format("{}: expected a JSON object", origin));
  ConfigFields fields(json, origin);
  checkSupported(fields);
  HfConfig config;
  config.model = readShape(fields, name);
  if (std::string problem = config.model.problem(); !problem.empty())
    throw Error(fmt::format("{}: not a model tlc can build: {}", origin, problem));
  std::vector<int32_t> bos = fields.tokenIds("bos_token_id", config.model.vocab);
  if (bos.size() > 1) fields.fail("bos_token_id", "lists several ids: a prompt starts with one");
  if (!bos.empty()) config.bos = bos[0];
  config.eos = fields.tokenIds("eos_token_id", config.model.vocab);
  config.unknown = fields.unread();
  return config;
}

HfConfig readHfConfig(const std::string &directory) {
  std::string path = directory + "/config.json";
  MappedFile file(path, "checkpoint config");
  std::string name = directory;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') + 1);
  return parseHfConfig(std::string(file.text()), path, name.empty() ? "checkpoint" : name);
}

} // namespace tlc
