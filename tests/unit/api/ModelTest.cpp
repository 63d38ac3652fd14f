// tlc::Model as a host program sees it: only <tlc/...> headers and libtlc.so.
#include "ApiTestSupport.h"

#include <cstdlib>
#include <utility>

namespace {

using namespace tlc::apitest;

TEST(Model, ReadsTheModelWithoutCompiling) {
  tlc::Model model(kTiny, cpuOptions());
  EXPECT_EQ(model.name(), "tiny");
  EXPECT_EQ(model.vocab(), 50);
  EXPECT_EQ(model.maxSeqLen(), 64);
  EXPECT_EQ(model.compiledShapes(), 0);
  EXPECT_TRUE(model.loadedShapes().empty());
}

TEST(Model, CompilesEachShapeOnFirstUseOnly) {
  tlc::Model model(kTiny, cpuOptions());
  tlc::ForwardResult first = model.forward(tokens(8, 50), 1, 8);
  EXPECT_EQ(model.compiledShapes(), 1);
  EXPECT_EQ(first.logits.shape, (std::vector<int64_t>{1, 8, 50}));
  tlc::ForwardResult wide = model.forward(tokens(2 * 16, 50), 2, 16);
  EXPECT_EQ(model.compiledShapes(), 2);
  EXPECT_EQ(wide.logits.shape, (std::vector<int64_t>{2, 16, 50}));
  tlc::ForwardResult again = model.forward(tokens(8, 50), 1, 8);
  EXPECT_EQ(model.compiledShapes(), 2) << "a shape served before is not compiled again";
  EXPECT_EQ(again.logits.data, first.logits.data);
  EXPECT_EQ(model.loadedShapes(), (std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {2, 16}}));
  EXPECT_EQ(model.program(2, 16).batch, 2);
  EXPECT_EQ(model.compiledShapes(), 2);
}

TEST(Model, GivesWhatCompilingTheShapeByHandGives) {
  tlc::Model model(kTiny, cpuOptions(3));
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{1, 5}, {3, 12}}) {
    std::vector<int32_t> ids = tokens(batch * seq, 50);
    tlc::ForwardResult served = model.forward(ids, batch, seq);

    tlc::Program program = tlc::compileModelFile(kTiny, {3, batch, seq, "f32"});
    std::unique_ptr<tlc::Backend> backend = tlc::createCpuBackend();
    backend->load(program, tlc::Weights::random(program.parameters, /*seed=*/3));
    tlc::ForwardResult byHand = backend->forward(ids);
    EXPECT_EQ(served.logits.data, byHand.logits.data) << "batch " << batch << " seq " << seq;
    EXPECT_EQ(served.loss, byHand.loss);
  }
}

TEST(Model, WritesLogitsIntoTheCallersBuffer) {
  tlc::Model model(kTiny, cpuOptions());
  std::vector<int32_t> ids = tokens(2 * 4, 50);
  std::vector<float> logits(2 * 4 * 50, -1.0f);
  float loss = model.forward(ids, 2, 4, logits);
  tlc::ForwardResult result = model.forward(ids, 2, 4);
  EXPECT_EQ(logits, result.logits.data);
  EXPECT_EQ(loss, result.loss);
  std::vector<float> small(10);
  EXPECT_NE(errorOf([&] { model.forward(ids, 2, 4, small); }).find("the logits buffer holds 10 floats"),
            std::string::npos);
}

TEST(Model, DropsTheLeastRecentlyUsedShapeBeyondItsLimit) {
  tlc::ModelOptions options = cpuOptions();
  options.maxLoadedShapes = 2;
  tlc::Model model(kTiny, options);
  model.forward(tokens(4, 50), 1, 4);
  model.forward(tokens(6, 50), 1, 6);
  model.forward(tokens(4, 50), 1, 4);  // 1x4 used last: 1x6 is the one to go
  model.forward(tokens(8, 50), 1, 8);
  EXPECT_EQ(model.loadedShapes(), (std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {1, 4}}));
  model.forward(tokens(6, 50), 1, 6);
  EXPECT_EQ(model.compiledShapes(), 4) << "1x6 was dropped, so it compiles again";
}

TEST(Model, SaysWhatIsWrongWithABadRequest) {
  tlc::Model model(kTiny, cpuOptions());
  EXPECT_NE(errorOf([&] { model.forward(tokens(65, 50), 1, 65); })
                .find("sequence length 65 exceeds the model's maximum of 64"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { model.forward(tokens(7, 50), 1, 8); }).find("expected 8 token ids"), std::string::npos);
  std::vector<int32_t> outOfRange = tokens(4, 50);
  outOfRange[2] = 50;
  EXPECT_NE(errorOf([&] { model.forward(outOfRange, 1, 4); }).find("token id 50 at position 2"), std::string::npos);
  EXPECT_NE(errorOf([&] { model.forward(tokens(4, 50), 0, 4); }).find("must be at least 1"), std::string::npos);
  // A batch whose logits count overflows is refused by name, not wrapped into a small size.
  std::vector<float> logits(16);
  std::string huge = errorOf([&] { model.forward(tokens(4, 50), int64_t(1) << 60, 4, logits); });
  EXPECT_NE(huge.find("more than 2^40 elements"), std::string::npos) << huge;
}

TEST(Model, ReportsABadFileAsLocatedDiagnostics) {
  std::string missing = errorOf([] { tlc::Model model("no/such/model.tl"); });
  EXPECT_NE(missing.find("cannot open model file 'no/such/model.tl'"), std::string::npos) << missing;
}

// A schedule override that does not read as its flag says is refused with the flag's and
// the variable's names, from options and from the environment alike; ones that read compile.
TEST(Compile, RefusesScheduleOverridesItCannotRead) {
  auto errorWith = [](const std::function<void(tlc::ScheduleOverrides &)> &set) {
    tlc::CompileOptions options{2, 1, 8, "f32"};
    set(options.overrides);
    return errorOf([&] { tlc::compileModelFile(kTiny, options); });
  };
  const std::vector<std::pair<std::function<void(tlc::ScheduleOverrides &)>, std::string>> bad = {
      {[](tlc::ScheduleOverrides &o) { o.attentionTile = "row"; }, "--attention-tile (TLC_ATTENTION_TILE) is 'row'"},
      {[](tlc::ScheduleOverrides &o) { o.attentionTile = "32x"; }, "--attention-tile"},
      {[](tlc::ScheduleOverrides &o) { o.gemmTile = "64x128x2x2x2"; }, "--gemm-tile (TLC_GEMM_TILE)"},
      {[](tlc::ScheduleOverrides &o) { o.wgmmaTile = "64x-64x4"; }, "--wgmma-tile (TLC_WGMMA_TILE)"},
      {[](tlc::ScheduleOverrides &o) { o.attentionGradRows = 12; }, "--attention-grad-rows=12 must be 8, 16 or 32"},
      {[](tlc::ScheduleOverrides &o) { o.workersPerSM = 9; }, "--workers-per-sm=9 must be 0 (the schedule's) to 8"},
      {[](tlc::ScheduleOverrides &o) { o.gemvSplits = -2; }, "--gemv-splits=-2 must be 0 (the schedule's) to 1024"},
      {[](tlc::ScheduleOverrides &o) { o.gemvColumns = 24; }, "--gemv-columns=24 must be a multiple of 16"},
      {[](tlc::ScheduleOverrides &o) { o.gemvColumns = 512; }, "--gemv-columns=512 must be 0 (the schedule's) to 256"},
      {[](tlc::ScheduleOverrides &o) { o.gemvWarps = 2; }, "--gemv-warps=2 must be 4, 8 or 16"},
      {[](tlc::ScheduleOverrides &o) { o.cacheAttentionSplitKeys = -64; },
       "--cache-attention-split-keys=-64 must be 0 (the schedule's) to 1048576"},
  };
  for (const auto &[set, message] : bad) {
    EXPECT_NE(errorWith(set).find(message), std::string::npos) << message;
    tlc::ScheduleOverrides overrides;
    set(overrides);
    EXPECT_NE(tlc::scheduleOverridesError(overrides).find(message), std::string::npos) << message << ", before compiling";
  }
  for (const char *tile : {"rows", "32x2", "16x1x1x2"})
    EXPECT_EQ(errorWith([&](tlc::ScheduleOverrides &o) { o.attentionTile = tile; }), "(no error)") << tile;
  EXPECT_EQ(errorWith([](tlc::ScheduleOverrides &o) { o.gemvSplits = 2, o.wgmmaTile = "64x64x4x1x1x0"; }), "(no error)");
  EXPECT_EQ(errorWith([](tlc::ScheduleOverrides &o) { o.gemvColumns = 32, o.gemvWarps = 16; }), "(no error)");
  setenv("TLC_GEMV_SPLITS", "two", 1);
  std::string fromEnvironment = errorWith([](tlc::ScheduleOverrides &) {});
  unsetenv("TLC_GEMV_SPLITS");
  EXPECT_NE(fromEnvironment.find("TLC_GEMV_SPLITS=two is not a whole number"), std::string::npos) << fromEnvironment;
  setenv("TLC_WORKERS_PER_SM", "12", 1);
  fromEnvironment = errorWith([](tlc::ScheduleOverrides &) {});
  unsetenv("TLC_WORKERS_PER_SM");
  EXPECT_NE(fromEnvironment.find("TLC_WORKERS_PER_SM=12 must be 0 (the schedule's) to 8"), std::string::npos)
      << fromEnvironment;
}

} // namespace
