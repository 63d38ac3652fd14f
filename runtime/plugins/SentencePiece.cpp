// libtlc-sentencepiece.so: Debian's libsentencepiece behind runtime/SentencePiecePlugin.h.
#include "runtime/SentencePiecePlugin.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <memory>

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor &processor(const void *model) { return *static_cast<const Processor *>(model); }

void *load(const std::string &path, std::string &error) {
  try {
    auto model = std::make_unique<Processor>();
    if (auto status = model->Load(path); !status.ok()) {
      error = status.ToString();
      return nullptr;
    }
    return model.release();
  } catch (const std::exception &exception) {
    error = exception.what();
    return nullptr;
  }
}

void release(void *model) { delete static_cast<Processor *>(model); }

bool encode(const void *model, const std::string &text, std::vector<int> &ids, std::string &error) {
  try {
    auto status = processor(model).Encode(text, &ids);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  } catch (const std::exception &exception) {
    error = exception.what();
    return false;
  }
}

bool decode(const void *model, const std::vector<int> &ids, std::string &text, std::string &error) {
  try {
    auto status = processor(model).Decode(ids, &text);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  } catch (const std::exception &exception) {
    error = exception.what();
    return false;
  }
}

int pieceCount(const void *model) { return processor(model).GetPieceSize(); }
int bos(const void *model) { return processor(model).bos_id(); }
int eos(const void *model) { return processor(model).eos_id(); }

} // namespace

extern "C" __attribute__((visibility("default"))) const tlc::SentencePiecePlugin *tlc_sentencepiece_plugin() {
  static const tlc::SentencePiecePlugin plugin{tlc::kSentencePiecePluginVersion, load, release, encode, decode,
                                               pieceCount, bos, eos};
  return &plugin;
}
