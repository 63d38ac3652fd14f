// Fuzz target: a tokenizer.json through the reader, then a few texts through encode and
// decode, and the ids of the input's own tail decoded. A finding is a crash, a sanitizer
// report or a round trip that breaks; tlc::Error is the expected answer.
#include "runtime/Error.h"
#include "runtime/Tokenizer.h"

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::unique_ptr<tlc::Tokenizer> tokenizer;
  try {
    tokenizer = tlc::parseHfTokenizer(text, "fuzz.json");
  } catch (const tlc::Error &) {
    return 0;
  }
  for (const char *sample : {"Hello world", "  two  spaces\n", "na\xc3\xafve \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x98\x80", "'s 123"}) {
    try {
      std::vector<int32_t> ids = tokenizer->encode(sample);
      for (int32_t id : ids)
        if (id < 0 || id >= tokenizer->vocabSize()) std::abort();  // encode makes only ids of the vocabulary
      tokenizer->decode(ids);
    } catch (const tlc::Error &) {
    }
  }
  std::vector<int32_t> ids;
  for (size_t i = size > 16 ? size - 16 : 0; i < size; ++i) ids.push_back(int32_t(data[i]) * 7 - 100);
  try {
    tokenizer->decode(ids);
  } catch (const tlc::Error &) {
  }
  return 0;
}
