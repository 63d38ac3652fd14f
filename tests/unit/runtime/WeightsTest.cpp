// Weights: seeded init, safetensors round-trips and errors, checks against parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "TestUtil.h"
#include "runtime/Bf16Parts.h"
#include "runtime/Weights.h"

namespace tlc {
namespace {

using test::errorMessage;

std::vector<Parameter> someParameters() {
  return {{"model.embed_tokens.weight", {64, 32}, "normal"},
          {"model.layers.0.self_attn.q_proj.weight", {32, 32}, "normal"},
          {"model.norm.weight", {32}, "ones"}};
}

Weights randomWeights(uint64_t seed) {
  Weights weights;
  weights.set("a", Tensor({3, 5}));
  weights.set("b.weight", Tensor({7}));
  weights.set("scalar", Tensor(std::vector<int64_t>{}));
  uint64_t stream = seed;
  for (const auto &[key, tensor] : weights.all()) {
    Tensor filled = tensor;
    filled.data = test::randomFloats(filled.data.size(), ++stream, -3, 3);
    weights.set(key, filled);
  }
  return weights;
}

// Writes a safetensors file from a header and data bytes, as another tool would.
void writeRaw(const std::string &path, const std::string &header, const std::string &data) {
  std::ofstream file(path, std::ios::binary);
  uint64_t length = header.size();
  file.write(reinterpret_cast<const char *>(&length), 8);
  file << header << data;
}

std::string bytesOf(const std::vector<uint16_t> &halves) {
  return std::string(reinterpret_cast<const char *>(halves.data()), halves.size() * 2);
}

TEST(WeightsInit, DeterministicPerSeedAndKey) {
  auto parameters = someParameters();
  Weights first = Weights::random(parameters, 42), again = Weights::random(parameters, 42);
  Weights other = Weights::random(parameters, 43);
  const std::string key = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_EQ(first.at(key).data, again.at(key).data);
  EXPECT_NE(first.at(key).data, other.at(key).data);
  EXPECT_NE(first.at(key).data, first.at("model.embed_tokens.weight").data);
  // A tensor does not depend on which other parameters exist or their order.
  Weights alone = Weights::random({parameters[1]}, 42);
  EXPECT_EQ(alone.at(key).data, first.at(key).data);
  EXPECT_EQ(first.at("model.norm.weight").data, std::vector<float>(32, 1.0f));
}

TEST(WeightsInit, SameValuesWhateverTheThreadCount) {
  // Several chunks of the parallel fill, and a partial last one.
  std::vector<Parameter> parameters = {{"wide", {300, 1000}, "normal"}};
  Weights serial = Weights::random(parameters, 9, /*threads=*/1);
  Weights parallel = Weights::random(parameters, 9, /*threads=*/4);
  EXPECT_EQ(serial.at("wide").data, parallel.at("wide").data);
  // Chunks are seeded apart: the second does not repeat the first.
  const std::vector<float> &data = serial.at("wide").data;
  EXPECT_NE(std::vector<float>(data.begin(), data.begin() + 100),
            std::vector<float>(data.begin() + 65536, data.begin() + 65636));
}

TEST(WeightsInit, NormalHasStdTwoHundredths) {
  Weights weights = Weights::random({{"big", {512, 512}, "normal"}}, 1);
  const std::vector<float> &data = weights.at("big").data;
  double sum = 0, sumOfSquares = 0, fourth = 0;
  for (float value : data) {
    sum += value;
    sumOfSquares += double(value) * value;
    fourth += std::pow(double(value), 4);
  }
  double count = double(data.size());
  double mean = sum / count, variance = sumOfSquares / count - mean * mean;
  EXPECT_NEAR(mean, 0.0, 2e-4);
  EXPECT_NEAR(std::sqrt(variance), 0.02, 0.0002);
  // Kurtosis 3 tells a normal from, say, a uniform of the same std (1.8).
  EXPECT_NEAR(fourth / count / (variance * variance), 3.0, 0.05);
}

TEST(WeightsInit, UnknownInitIsAnError) {
  EXPECT_CONTAINS(errorMessage([] {
                    Weights::random({{"w", {2}, "xavier"}}, 1);
                  }),
                  "parameter 'w' has unknown init 'xavier'");
}

TEST(Safetensors, F32RoundTripIsExact) {
  test::TempDir directory;
  Weights weights = randomWeights(5);
  weights.saveSafetensors(directory.file("w.safetensors"));
  Weights loaded = Weights::loadSafetensors(directory.file("w.safetensors"));
  ASSERT_EQ(loaded.all().size(), weights.all().size());
  for (const auto &[key, tensor] : weights.all()) {
    EXPECT_EQ(loaded.at(key).shape, tensor.shape) << key;
    EXPECT_EQ(loaded.at(key).data, tensor.data) << key;
  }
}

TEST(Safetensors, Bf16RoundTripRoundsOnce) {
  test::TempDir directory;
  Weights weights = randomWeights(6);
  weights.saveSafetensors(directory.file("w.safetensors"), DType::BF16);
  Weights loaded = Weights::loadSafetensors(directory.file("w.safetensors"));
  for (const auto &[key, tensor] : weights.all()) {
    ASSERT_EQ(loaded.at(key).shape, tensor.shape);
    for (size_t i = 0; i < tensor.data.size(); ++i)
      EXPECT_EQ(loaded.at(key).data[i], bf16ToFloat(floatToBf16(tensor.data[i]))) << key << i;
  }
  EXPECT_THROW(weights.saveSafetensors(directory.file("x.safetensors"), DType::I32), Error);
}

TEST(Safetensors, FileLayoutFollowsTheFormat) {
  test::TempDir directory;
  Weights weights;
  weights.set("x", Tensor({2}));
  weights.saveSafetensors(directory.file("w.safetensors"));
  std::ifstream file(directory.file("w.safetensors"), std::ios::binary);
  uint64_t headerLength = 0;
  file.read(reinterpret_cast<char *>(&headerLength), 8);
  std::string header(headerLength, '\0');
  file.read(header.data(), std::streamsize(headerLength));
  EXPECT_EQ(headerLength % 8, 0u);
  EXPECT_CONTAINS(header, "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}");
  EXPECT_CONTAINS(header, "__metadata__");
  EXPECT_EQ(std::filesystem::file_size(directory.file("w.safetensors")), 8 + headerLength + 8);
}

TEST(Safetensors, LoadsBf16AndF16WrittenElsewhere) {
  test::TempDir directory;
  // bf16 1.5 = 0x3fc0, -2 = 0xc000; f16 1.5 = 0x3e00, -2 = 0xc000, 2^-24 = 0x0001.
  writeRaw(
      directory.file("mixed.safetensors"),
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
      R"("h":{"dtype":"F16","shape":[1,3],"data_offsets":[4,10]}})",
      bytesOf({0x3fc0, 0xc000, 0x3e00, 0xc000, 0x0001}));
  Weights loaded = Weights::loadSafetensors(directory.file("mixed.safetensors"));
  EXPECT_EQ(loaded.at("b").data, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(loaded.at("h").shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(loaded.at("h").data, (std::vector<float>{1.5f, -2.0f, std::ldexp(1.0f, -24)}));
  EXPECT_FALSE(loaded.contains("__metadata__"));
}

TEST(Safetensors, MissingFile) {
  test::TempDir directory;
  std::string path = directory.file("none.safetensors");
  EXPECT_EQ(errorMessage([&] { Weights::loadSafetensors(path); }),
            "cannot open safetensors file '" + path + "': No such file or directory");
}

TEST(Safetensors, TruncatedFile) {
  test::TempDir directory;
  Weights weights = randomWeights(8);
  std::string path = directory.file("w.safetensors");
  weights.saveSafetensors(path);
  auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 3);
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }), "truncated");
  std::filesystem::resize_file(path, 20); // cut inside the header
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }), "truncated");
  std::filesystem::resize_file(path, 5); // cut inside the length
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }), "truncated");
}

TEST(Safetensors, BadHeaderJson) {
  test::TempDir directory;
  std::string path = directory.file("bad.safetensors");
  writeRaw(path, R"({"x": {"dtype": "F32", "shape": [1], )", "abcd");
  std::string message = errorMessage([&] { Weights::loadSafetensors(path); });
  EXPECT_CONTAINS(message, path);
  EXPECT_CONTAINS(message, "bad header JSON");
  writeRaw(path, R"({"x": {"dtype": "F32", "shape": [1]}})", "abcd");
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "tensor 'x' has no 'data_offsets'");
}

TEST(Safetensors, UnsupportedDtype) {
  test::TempDir directory;
  std::string path = directory.file("f64.safetensors");
  writeRaw(path, R"({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}   )",
           std::string(8, '\0'));
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "tensor 'x' has unsupported dtype 'F64'");
}

TEST(Safetensors, DataOffsetsMustFitAndMatchTheShape) {
  test::TempDir directory;
  std::string path = directory.file("o.safetensors");
  writeRaw(path, R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}})",
           std::string(12, '\0'));
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "tensor 'x' has 12 data bytes, but F32 2 needs 8");
  writeRaw(path, R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
           std::string(12, '\0'));
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "data_offsets [8, 16] lie outside the 12 data bytes");
  writeRaw(path, R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})",
           std::string(12, '\0'));
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }), "data_offsets [8, 0]");
}

// A header padded to 8 bytes, as writers do, so the data starts aligned.
std::string padded(std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

TEST(Safetensors, DuplicateKeysAreRefused) {
  test::TempDir directory;
  std::string path = directory.file("dup.safetensors");
  writeRaw(path, padded(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                        R"( "x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})"),
           std::string(8, '\0'));
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }), "duplicate key \"x\"");
}

TEST(Safetensors, DataRangesMustTileTheData) {
  test::TempDir directory;
  std::string path = directory.file("t.safetensors");
  auto load = [&](const std::string &header, size_t dataBytes) {
    writeRaw(path, padded(header), std::string(dataBytes, '\0'));
    return errorMessage([&] { Weights::loadSafetensors(path); });
  };
  EXPECT_CONTAINS(load(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                       R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                       12),
                  "tensors 'a' and 'b' overlap in the data");
  EXPECT_CONTAINS(load(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
                  "data bytes 0..4 before tensor 'a' belong to no tensor");
  EXPECT_CONTAINS(load(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12),
                  "data bytes 4..12 at the end belong to no tensor");
  EXPECT_CONTAINS(load(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
                       R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                       6),
                  "tensor 'b' starts at file offset");
  EXPECT_CONTAINS(load(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4),
                  "more than 2^40 elements");
  EXPECT_CONTAINS(load(R"({"__metadata__": {"format": 3}})", 0), "__metadata__ must map strings to strings");
}

TEST(Safetensors, HeaderLargerThanTheFormatAllowsIsRefusedUnread) {
  test::TempDir directory;
  std::string path = directory.file("huge.safetensors");
  std::ofstream file(path, std::ios::binary);
  uint64_t length = uint64_t(1) << 40;
  file.write(reinterpret_cast<const char *>(&length), 8);
  file << "{}";
  file.close();
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "the header is 1099511627776 bytes, more than the format's limit of 100000000");
}

TEST(Safetensors, NonFiniteWeightsAreAnErrorNamingTheTensor) {
  test::TempDir directory;
  std::string path = directory.file("nan.safetensors");
  float values[2] = {1.0f, std::nanf("")};
  writeRaw(path, padded(R"({"model.norm.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})"),
           std::string(reinterpret_cast<const char *>(values), 8));
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "tensor 'model.norm.weight' holds nan at element 1: weights must be finite");
  writeRaw(path, padded(R"({"h": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}})"),
           bytesOf({0x7c00}));  // f16 +infinity
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }), "tensor 'h' holds inf");
}

TEST(Safetensors, OnlyTheModelsTensorsAreRead) {
  test::TempDir directory;
  std::string path = directory.file("extra.safetensors");
  float gain[2] = {1.0f, 2.0f}, bad = std::nanf("");
  std::string data = std::string(8, '\0') + std::string(reinterpret_cast<const char *>(gain), 8) +
                     std::string(reinterpret_cast<const char *>(&bad), 4);
  writeRaw(path,
           padded(R"({"unused.i64": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},)"
                  R"( "model.norm.weight": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
                  R"( "unused.nan": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]}})"),
           data);
  std::vector<Parameter> parameters = {{"model.norm.weight", {2}, "ones"}};
  Weights weights = Weights::loadSafetensors(path, parameters);
  EXPECT_EQ(weights.at("model.norm.weight").data, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_FALSE(weights.contains("unused.nan"));
  // Reading every tensor meets the ones the model never needed.
  EXPECT_CONTAINS(errorMessage([&] { Weights::loadSafetensors(path); }),
                  "tensor 'unused.i64' has unsupported dtype 'I64'");
  std::vector<Parameter> missing = {{"model.norm.weight", {3}, "ones"}, {"lm_head.weight", {2, 2}, "normal"}};
  std::string message = errorMessage([&] { Weights::loadSafetensors(path, missing); });
  EXPECT_CONTAINS(message, "'model.norm.weight' has shape 2, expected 3");
  EXPECT_CONTAINS(message, "missing 'lm_head.weight'");
}

TEST(Weights, CheckAgainstListsEveryProblem) {
  auto parameters = someParameters();
  Weights weights = Weights::random(parameters, 1);
  weights.checkAgainst(parameters, "random"); // complete: no throw
  Weights broken;
  broken.set("model.embed_tokens.weight", Tensor({64, 31}));
  broken.set("model.layers.0.self_attn.q_proj.weight", Tensor({32, 32}));
  std::string message = errorMessage([&] { broken.checkAgainst(parameters, "ckpt.safetensors"); });
  EXPECT_CONTAINS(message, "ckpt.safetensors");
  EXPECT_CONTAINS(message, "2 problems");
  EXPECT_CONTAINS(message, "'model.embed_tokens.weight' has shape 64x31, expected 64x32");
  EXPECT_CONTAINS(message, "missing 'model.norm.weight' (expected shape 32)");
  EXPECT_EQ(message.find("q_proj"), std::string::npos) << "a correct tensor was reported";
}

TEST(Weights, AtNamesTheMissingKey) {
  Weights weights;
  EXPECT_EQ(errorMessage([&] { weights.at("lm_head.weight"); }), "missing weight 'lm_head.weight'");
}

} // namespace
} // namespace tlc

namespace tlc {
namespace {

// A Weight value with a column scale (a folded RMSNorm gain): keys concatenated, then
// column k of every row times element k of the scale, also when either is drawn lazily.
TEST(Weights, ConcatenatedScalesColumnsByTheColumnScaleKey) {
  Weights weights;
  Tensor a({1, 3}), b({2, 3}), gain({3});
  a.data = {1, 2, 3};
  b.data = {4, 5, 6, 7, 8, 9};
  gain.data = {0.5f, -2, 3};
  weights.set("a", a);
  weights.set("b", b);
  weights.set("gain", gain);
  Value value;
  value.name = "w_ab_scaled";
  value.shape = {3, 3};
  value.storage = Storage::Weight;
  value.weightKeys = {"a", "b"};
  value.columnScaleKey = "gain";
  EXPECT_EQ(weights.concatenated(value, "cpu"), (std::vector<float>{0.5f, -4, 9, 2, -10, 18, 3.5f, -16, 27}));

  // Both drawn on demand from their seeds: the same product.
  Weights lazy = Weights::random({{"w", {2, 3}, "normal"}, {"g", {3}, "normal"}}, 7);
  Value plain = value, scaled = value;
  plain.shape = scaled.shape = {2, 3};
  plain.weightKeys = scaled.weightKeys = {"w"};
  plain.columnScaleKey.clear();
  scaled.columnScaleKey = "g";
  std::vector<float> product = lazy.concatenated(scaled, "cpu"), unscaled = lazy.concatenated(plain, "cpu");
  const std::vector<float> &g = lazy.at("g").data;
  ASSERT_EQ(product.size(), 6u);
  for (size_t e = 0; e < 6; ++e) EXPECT_EQ(product[e], unscaled[e] * g[e % 3]) << e;

  value.columnScaleKey = "b";
  EXPECT_EQ(errorMessage([&] { weights.concatenated(value, "cuda"); }),
            "cuda backend: weight 'w_ab_scaled' has 3 columns but its column scale 'b' has 6 elements");
  value.columnScaleKey = "missing";
  EXPECT_EQ(errorMessage([&] { weights.concatenated(value, "cpu"); }), "missing weight 'missing'");
}

// A weight as bf16 parts (runtime/Bf16Parts.h, what sm_90a's 3xBF16 GEMMs read): each
// block of 32 floats as their bf16 high parts, then their residuals, which together keep
// about 16 bits of every element where the high parts alone keep 8.
TEST(Bf16Parts, BlocksHoldHighPartsThenResidualsThatSumBack) {
  std::mt19937 random(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> weight(3 * kBf16PartsBlock);
  for (float &x : weight) x = std::ldexp(normal(random), exponent(random));
  const std::vector<char> bytes = deviceBytes(DType::F32, weight, /*asBf16Parts=*/true);
  ASSERT_EQ(bytes.size(), weight.size() * 4);  // 4 bytes an element, as the floats took
  std::vector<uint16_t> parts(2 * weight.size());
  std::memcpy(parts.data(), bytes.data(), bytes.size());
  double partsError = 0, highError = 0;
  for (size_t i = 0; i < weight.size(); ++i) {
    const size_t block = i / kBf16PartsBlock, e = i % kBf16PartsBlock;
    const uint16_t high = parts[2 * kBf16PartsBlock * block + e], low = parts[2 * kBf16PartsBlock * block + kBf16PartsBlock + e];
    EXPECT_EQ(high, floatToBf16(weight[i])) << i;
    const double x = weight[i], sum = double(bf16ToFloat(high)) + double(bf16ToFloat(low));
    EXPECT_LE(std::abs(sum - x), std::ldexp(std::abs(x), -16)) << i;
    partsError += (sum - x) * (sum - x) / (x * x);
    highError += (bf16ToFloat(high) - x) * (bf16ToFloat(high) - x) / (x * x);
  }
  EXPECT_LT(partsError, highError / 1000);  // the residuals carry the next 8 bits
}

// The other layouts deviceBytes writes: the floats themselves, bf16 rounded to nearest,
// token ids as i32.
TEST(Bf16Parts, DeviceBytesOfEachDtype) {
  const std::vector<float> values{1.0f, -2.5f, 3.0f + 3.0f / 256, 7.0f};
  const std::vector<char> f32 = deviceBytes(DType::F32, values, false);
  ASSERT_EQ(f32.size(), 16u);
  EXPECT_EQ(std::memcmp(f32.data(), values.data(), 16), 0);
  const std::vector<char> bf16 = deviceBytes(DType::BF16, values, false);
  ASSERT_EQ(bf16.size(), 8u);
  uint16_t halves[4];
  std::memcpy(halves, bf16.data(), 8);
  EXPECT_EQ(bf16ToFloat(halves[1]), -2.5f);
  EXPECT_EQ(bf16ToFloat(halves[2]), 3.0f + 1.0f / 64);  // 3/4 of bf16's step 2^-6 above 3: rounded up, not cut
  const std::vector<char> ids = deviceBytes(DType::I32, values, false);
  int32_t id[4];
  std::memcpy(id, ids.data(), 16);
  EXPECT_EQ(id[3], 7);
}

} // namespace
} // namespace tlc
