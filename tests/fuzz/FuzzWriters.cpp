// Fuzz target: the output writer (runtime/OutputFile) and a writer built on it
// (safetensors), with one of their system calls made to fail. The input picks the mode,
// the call that fails and its errno, whether a file is there already, and the bytes
// (or tensors) written.
//
// A finding is a crash, a sanitizer report, an injected failure that is not reported, a
// message that does not name the path, an old file that changed or vanished after a
// failed write, a new file that is not what was written, or a temporary left behind.
#include "runtime/Error.h"
#include "runtime/OutputFile.h"
#include "runtime/Weights.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

[[noreturn]] void finding(const std::string &what) {
  std::fprintf(stderr, "fuzz-writers finding: %s\n", what.c_str());
  std::abort();
}

// The scratch directory goes at exit (a path kept where static destructors cannot reach it).
void removeAtExit(const fs::path &directory) {
  static std::string *path = new std::string(directory.string());
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(*path, ignored);
  });
}

const fs::path &scratch() {
  static const fs::path directory = [] {
    std::string pattern = (fs::temp_directory_path() / "tlc-fuzz-writers-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) std::abort();
    removeAtExit(pattern);
    return fs::path(pattern);
  }();
  return directory;
}

std::string readFile(const fs::path &path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// The scratch directory holds the target and nothing else (no temporary left behind).
void expectOnly(const std::string &name) {
  for (const auto &entry : fs::directory_iterator(scratch()))
    if (entry.path().filename() != name) finding("left behind: " + entry.path().filename().string());
}

struct Input {
  const uint8_t *data;
  size_t size;
  uint8_t take() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
};

// Tensors from the input's bytes: 1 to 3, each up to 64 elements, finite values.
tlc::Weights weightsFrom(Input &input) {
  tlc::Weights weights;
  int count = 1 + input.take() % 3;
  for (int t = 0; t < count; ++t) {
    int64_t elements = 1 + input.take() % 64;
    tlc::Tensor tensor({elements});
    for (float &x : tensor.data) x = float(int(input.take()) - 128) / 16.0f;
    weights.set("model.tensor" + std::to_string(t), tensor);
  }
  return weights;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Input input{data, size};
  bool safetensors = input.take() % 2;
  int failAt = input.take() % 12;  // 0: none
  static const int errors[] = {ENOSPC, EIO, EFBIG, EDQUOT, EACCES, EROFS, EINTR};
  int error = errors[input.take() % 7];
  bool existing = input.take() % 2;
  const std::string name = safetensors ? "w.safetensors" : "out.bin";
  std::string path = (scratch() / name).string();
  fs::remove_all(scratch());
  fs::create_directories(scratch());

  tlc::Weights oldWeights, newWeights;
  std::string oldText, newText;
  if (existing) {
    if (safetensors) {
      oldWeights = weightsFrom(input);
      oldWeights.saveSafetensors(path);
    } else {
      oldText = "the user's file";
      tlc::writeFileAtomically(path, oldText, "test file");
    }
    oldText = readFile(path);
  }
  if (safetensors) newWeights = weightsFrom(input);
  else newText.assign(reinterpret_cast<const char *>(input.data), input.size);

  tlc::testing::failWriterCall(failAt, error);
  std::string message;
  try {
    if (safetensors) {
      newWeights.saveSafetensors(path);
    } else {
      tlc::OutputFile file(path, "test file");
      // In pieces whose sizes the bytes choose, as the writers write headers and tensors.
      for (size_t at = 0; at < newText.size();) {
        size_t piece = std::min(newText.size() - at, size_t(1) + uint8_t(newText[at]) * 3);
        file.write(newText.data() + at, piece);
        at += piece;
      }
      file.commit();
    }
  } catch (const tlc::Error &caught) {
    message = caught.what();
  }
  int calls = tlc::testing::writerCalls();
  tlc::testing::failWriterCall(0, 0);

  bool injected = failAt > 0 && failAt <= calls && error != EINTR;  // an interrupted write is retried
  if (injected && message.empty()) finding("call " + std::to_string(failAt) + " failed and nothing was reported");
  if (!injected && !message.empty()) finding("a write failed with nothing injected: " + message);
  if (!message.empty()) {
    if (message.find(path) == std::string::npos) finding("the message does not name the path: " + message);
    if (existing ? readFile(path) != oldText : fs::exists(path)) finding("a failed write changed the target");
    if (existing && safetensors) {
      tlc::Weights reread = tlc::Weights::loadSafetensors(path);
      for (const auto &[key, tensor] : oldWeights.all())
        if (reread.at(key).data != tensor.data) finding("the old safetensors file reads back otherwise");
    }
    if (existing) expectOnly(name);
    else expectOnly("");
    return 0;
  }
  if (safetensors) {
    tlc::Weights reread = tlc::Weights::loadSafetensors(path);
    for (const auto &[key, tensor] : newWeights.all())
      if (reread.at(key).data != tensor.data) finding("the new safetensors file reads back otherwise");
  } else if (readFile(path) != newText) {
    finding("the new file is not what was written");
  }
  expectOnly(name);
  return 0;
}
