// tokenizer.model through tlc's SentencePiece plugin, loaded on first use: tlc links no
// SentencePiece library itself (runtime/SentencePiecePlugin.h says why).
#include "runtime/SentencePiecePlugin.h"
#include "runtime/Tokenizer.h"

#include <fmt/format.h>

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <mutex>

#include "runtime/Error.h"
#include "runtime/MappedFile.h"

namespace tlc {
namespace {

// Where the plugin may be: beside the running program (a build's tools/), in the
// install's library directory, in this build's own tree, then the loader's search path.
std::vector<std::string> pluginCandidates() {
  std::vector<std::string> paths;
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length > 0) {
    std::string directory(self, size_t(length));
    directory = directory.substr(0, directory.find_last_of('/'));
    paths.push_back(directory + "/" + kSentencePiecePluginFile);
#ifdef TLC_INSTALL_LIBDIR
    paths.push_back(directory + "/../" TLC_INSTALL_LIBDIR "/" + kSentencePiecePluginFile);
#endif
  }
#ifdef TLC_PLUGIN_BUILD_DIR
  paths.push_back(std::string(TLC_PLUGIN_BUILD_DIR) + "/" + kSentencePiecePluginFile);
#endif
  paths.push_back(kSentencePiecePluginFile);
  return paths;
}

const SentencePiecePlugin &plugin() {
  static std::once_flag once;
  static const SentencePiecePlugin *loaded = nullptr;
  static std::string problem;
  std::call_once(once, [] {
    for (const std::string &path : pluginCandidates()) {
      bool exists = path.find('/') == std::string::npos || ::access(path.c_str(), F_OK) == 0;
      if (!exists) continue;
      void *library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      auto entry = library ? reinterpret_cast<decltype(&tlc_sentencepiece_plugin)>(
                                 ::dlsym(library, "tlc_sentencepiece_plugin"))
                           : nullptr;
      if (entry && entry()->version == kSentencePiecePluginVersion) {
        loaded = entry();
        return;
      }
      if (path.find('/') != std::string::npos)  // one that is there but does not load says why
        problem = fmt::format("tlc's SentencePiece plugin '{}' does not load: {}", path,
                              library ? "it is of another version of tlc" : ::dlerror());
    }
    if (problem.empty())
      problem = fmt::format("reading a SentencePiece model needs tlc's plugin {}, which is not beside tlc (build tlc "
                            "with Debian's libsentencepiece-dev: scripts/install-deps.sh)",
                            kSentencePiecePluginFile);
  });
  if (!loaded) throw Error(problem);
  return *loaded;
}

class SentencePieceTokenizer : public Tokenizer {
public:
  explicit SentencePieceTokenizer(const std::string &path) : plugin_(plugin()), path_(path) {
    std::string error;
    model_ = plugin_.load(path, error);
    if (!model_) throw Error(fmt::format("SentencePiece model '{}': {}", path, error));
  }
  ~SentencePieceTokenizer() override { plugin_.release(model_); }
  SentencePieceTokenizer(const SentencePieceTokenizer &) = delete;
  SentencePieceTokenizer &operator=(const SentencePieceTokenizer &) = delete;

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    std::string error;
    if (!plugin_.encode(model_, std::string(text), ids, error))
      throw Error(fmt::format("SentencePiece model '{}' cannot encode the text: {}", path_, error));
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<int32_t> &ids) const override {
    for (int32_t id : ids)
      if (id < 0 || id >= vocabSize())
        throw Error(fmt::format("token id {} is not in the vocabulary of {} (0..{})", id, describe(), vocabSize() - 1));
    std::string text, error;
    if (!plugin_.decode(model_, std::vector<int>(ids.begin(), ids.end()), text, error))
      throw Error(fmt::format("SentencePiece model '{}' cannot decode: {}", path_, error));
    return text;
  }

  int64_t vocabSize() const override { return plugin_.pieceCount(model_); }
  std::optional<int32_t> bos() const override { return idOrNone(plugin_.bos(model_)); }
  std::optional<int32_t> eos() const override { return idOrNone(plugin_.eos(model_)); }
  std::string describe() const override {
    return fmt::format("SentencePiece model '{}' ({} pieces)", path_, vocabSize());
  }

private:
  static std::optional<int32_t> idOrNone(int id) { return id < 0 ? std::nullopt : std::optional<int32_t>(id); }

  const SentencePiecePlugin &plugin_;
  std::string path_;
  void *model_ = nullptr;
};

} // namespace

std::unique_ptr<Tokenizer> loadSentencePiece(const std::string &path) {
  if (std::string problem = inputFileProblem(path); !problem.empty())
    throw Error(fmt::format("cannot open SentencePiece model '{}': {}", path, problem));
  return std::make_unique<SentencePieceTokenizer>(path);
}

} // namespace tlc
