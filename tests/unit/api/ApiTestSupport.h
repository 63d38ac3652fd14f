// What the API tests share: the tiny model, CPU options, token ids and errors as text.
#pragma once

#include <tlc/tlc.h>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace tlc::apitest {

inline const std::string kTiny = std::string(TLC_SOURCE_DIR) + "/tests/lit/Inputs/tiny.tl";  // vocab 50, max seq 64

inline tlc::ModelOptions cpuOptions(int level = 2) {
  tlc::ModelOptions options;
  options.optLevel = level;
  options.backend.target = "cpu";
  options.seed = 3;
  return options;
}

inline std::vector<int32_t> tokens(int64_t count, int32_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7 + 3) % size_t(vocab));
  return ids;
}

inline std::string errorOf(const std::function<void()> &body) {
  try {
    body();
  } catch (const tlc::Error &error) {  // caught across libtlc's boundary: its typeinfo is exported
    return error.what();
  }
  return "(no error)";
}

} // namespace tlc::apitest
