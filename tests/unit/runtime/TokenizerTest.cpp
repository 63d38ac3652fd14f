// Tokenizers: a SentencePiece model trained here (libsentencepiece's trainer) read through
// tlc's plugin; the same model as a tokenizer.json (converted as transformers converts
// Llama's) read by tlc's own BPE, which must give the library's ids on the same texts; a
// byte-level BPE (GPT-2, Llama 3) whose merges and splits are worked out by hand; and
// generated text streamed without cutting a character.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "runtime/OutputFile.h"
#include "runtime/PreTokenize.h"
#include "runtime/Tokenizer.h"
#include "runtime/Unicode.h"
#include "TestUtil.h"

using namespace tlc;
using tlc::test::errorMessage;

namespace {

// Texts every tokenizer must give back as they were: spaces (leading, doubled,
// trailing), tabs and newlines, accents, CJK and emoji (byte fallback), digits.
const std::vector<std::string> kTexts = {
    "This program is free software: you can redistribute it and/or modify it",
    "  two  spaces, a\ttab and a trailing space ",
    "line one\nline two\n",
    "ünïcödé — naïve café, 漢字 and 😀",
    "version 3 (GPLv3), 29 June 2007; 1234567 + 3.14",
    "WITHOUT ANY WARRANTY; without even the implied warranty of MERCHANTABILITY",
    "x",
};

const char *kCorpus =
    "This program is free software: you can redistribute it and/or modify it under the terms of the GNU General "
    "Public License as published by the Free Software Foundation, either version 3 of the License, or (at your "
    "option) any later version.\n"
    "This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY; without even the "
    "implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the GNU General Public License "
    "for more details.\n"
    "You should have received a copy of the GNU General Public License along with this program. If not, see the "
    "licenses page of the Free Software Foundation.\n"
    "Copyright (C) 2007 Free Software Foundation, Inc. Everyone is permitted to copy and distribute verbatim copies "
    "of this license document, but changing it is not allowed.\n"
    "The licenses for most software and other practical works are designed to take away your freedom to share and "
    "change the works. By contrast, the GNU General Public License is intended to guarantee your freedom to share "
    "and change all versions of a program, to make sure it remains free software for all its users.\n";

std::string asTokenizerJson(const sentencepiece::SentencePieceProcessor &sp);

// A BPE model as Llama's: byte fallback, no normalization, spaces kept as they are; the
// same model as a tokenizer.json beside it.
class SentencePieceModel : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    directory_ = new test::TempDir;
    writeFileAtomically(directory_->file("corpus.txt"), kCorpus, "corpus");
    auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + directory_->file("corpus.txt") + " --model_prefix=" + directory_->file("tiny") +
        " --model_type=bpe --vocab_size=350 --byte_fallback=true --normalization_rule_name=identity"
        " --remove_extra_whitespaces=false --split_digits=true --allow_whitespace_only_pieces=true"
        " --character_coverage=1.0 --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
    library_ = new sentencepiece::SentencePieceProcessor;
    ASSERT_TRUE(library_->Load(modelPath()).ok());
    writeFileAtomically(jsonPath(), asTokenizerJson(*library_), "tokenizer");
  }
  static void TearDownTestSuite() {
    delete library_;
    delete directory_;
  }
  static std::string modelPath() { return directory_->file("tiny.model"); }
  static std::string jsonPath() { return directory_->file("tokenizer.json"); }
  // The library's own ids of `text`.
  static std::vector<int32_t> libraryIds(const std::string &text) {
    std::vector<int> ids;
    EXPECT_TRUE(library_->Encode(text, &ids).ok());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  static test::TempDir *directory_;
  static sentencepiece::SentencePieceProcessor *library_;
};
test::TempDir *SentencePieceModel::directory_ = nullptr;
sentencepiece::SentencePieceProcessor *SentencePieceModel::library_ = nullptr;

// What transformers' LlamaConverter writes for a SentencePiece BPE model: the vocabulary,
// merges of every pair of pieces that makes a piece (by the made piece's score, highest
// first), "▁" for spaces prepended, byte fallback, the control pieces as added tokens.
std::string asTokenizerJson(const sentencepiece::SentencePieceProcessor &sp) {
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  std::vector<std::tuple<std::string, std::string, float>> merges;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    vocab[sp.IdToPiece(id)] = id;
    if (sp.IsControl(id) || sp.IsUnknown(id))
      added.push_back({{"id", id}, {"content", sp.IdToPiece(id)}, {"special", true}, {"normalized", false}});
  }
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    const std::string &piece = sp.IdToPiece(id);
    std::vector<std::tuple<std::string, std::string, float>> local;
    CodePoints characters = decodeUtf8(piece, "piece");
    for (size_t k = 1; k < characters.points.size(); ++k) {
      std::string left = piece.substr(0, characters.offsets[k]), right = piece.substr(characters.offsets[k]);
      if (vocab.contains(left) && vocab.contains(right)) local.emplace_back(left, right, sp.GetScore(id));
    }
    std::sort(local.begin(), local.end(), [&](const auto &a, const auto &b) {
      return std::make_pair(int(vocab[std::get<0>(a)]), int(vocab[std::get<1>(a)])) <
             std::make_pair(int(vocab[std::get<0>(b)]), int(vocab[std::get<1>(b)]));
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const auto &a, const auto &b) { return std::get<2>(a) > std::get<2>(b); });
  nlohmann::json mergeList = nlohmann::json::array();
  for (const auto &[left, right, score] : merges) mergeList.push_back(left + " " + right);
  const std::string space = "\xE2\x96\x81";
  nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", space}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
        {"merges", mergeList}}}};
  return tokenizer.dump();
}

TEST_F(SentencePieceModel, RoundTripsThroughThePluginAsTheLibraryEncodes) {
  std::unique_ptr<Tokenizer> tokenizer = loadTokenizer(modelPath());
  EXPECT_EQ(tokenizer->vocabSize(), 350);
  EXPECT_EQ(tokenizer->bos(), 1);
  EXPECT_EQ(tokenizer->eos(), 2);
  for (const std::string &text : kTexts) {
    std::vector<int32_t> ids = tokenizer->encode(text);
    EXPECT_EQ(ids, libraryIds(text)) << text;
    EXPECT_EQ(tokenizer->decode(ids), text);
  }
  EXPECT_CONTAINS(errorMessage([&] { tokenizer->decode({5, 350}); }), "token id 350 is not in the vocabulary");
}

TEST_F(SentencePieceModel, ItsTokenizerJsonGivesTheLibrarysIds) {
  std::unique_ptr<Tokenizer> tokenizer = loadTokenizer(jsonPath());
  EXPECT_EQ(tokenizer->vocabSize(), 350);
  size_t bytePieces = 0;
  for (const std::string &text : kTexts) {
    std::vector<int32_t> ids = tokenizer->encode(text);
    EXPECT_EQ(ids, libraryIds(text)) << text;
    EXPECT_EQ(tokenizer->decode(ids), text);
    for (int32_t id : ids) bytePieces += library_->IsByte(id);
  }
  EXPECT_GT(bytePieces, 10u) << "the texts exercise byte fallback";
  // Special tokens split out of the text and left out of decoding, as the library does.
  std::vector<int32_t> ids = tokenizer->encode("<s>free");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tokenizer->decode(ids), "free");
}

TEST_F(SentencePieceModel, ADirectoryPrefersTokenizerModel) {
  test::TempDir checkpoint;
  writeFileAtomically(checkpoint.file("tokenizer.json"), asTokenizerJson(*library_), "tokenizer");
  EXPECT_CONTAINS(loadTokenizer(checkpoint.file(""))->describe(), "tokenizer.json");
  std::ifstream in(modelPath(), std::ios::binary);
  writeFileAtomically(checkpoint.file("tokenizer.model"), std::string(std::istreambuf_iterator<char>(in), {}), "model");
  EXPECT_CONTAINS(loadTokenizer(checkpoint.file(""))->describe(), "SentencePiece model");
  writeFileAtomically(checkpoint.file("bad.model"), "not a model", "model");
  EXPECT_CONTAINS(errorMessage([&] { loadTokenizer(checkpoint.file("bad.model")); }), "SentencePiece model '");
}

// GPT-2's byte alphabet and merges chosen so each word's merging can be followed by hand.
std::string byteLevelJson(const std::string &preTokenizer) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytesToAlphabet(std::string(1, char(b)))] = b;
  std::vector<std::string> merges = {"l l", "e ll", "h ell", "hell o", "Ġ t", "h e",
                                     "Ġt he", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"};
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string joined = merges[i];
    joined.erase(joined.find(' '), 1);
    vocab[joined] = 256 + int(i);
  }
  nlohmann::json added = {{{"id", 268}, {"content", "<|endoftext|>"}, {"special", true}}};
  return nlohmann::json({{"added_tokens", added},
                         {"normalizer", nullptr},
                         {"pre_tokenizer", nlohmann::json::parse(preTokenizer)},
                         {"decoder", {{"type", "ByteLevel"}}},
                         {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}}}})
      .dump();
}

TEST(ByteLevelBpe, MergesByRankAndRoundTripsEveryByte) {
  test::TempDir directory;
  writeFileAtomically(directory.file("tokenizer.json"), byteLevelJson(R"({"type": "ByteLevel", "use_regex": true})"),
                      "tokenizer");
  std::unique_ptr<Tokenizer> tokenizer = loadTokenizer(directory.file("tokenizer.json"));
  EXPECT_EQ(tokenizer->vocabSize(), 269);
  // hello: l+l, e+ll, h+ell, hell+o; " world": Ġ+w, o+r, Ġw+or, Ġwor+l, Ġworl+d.
  EXPECT_EQ(tokenizer->encode("hello world"), (std::vector<int32_t>{259, 267}));
  // " the": Ġ+t, h+e, Ġt+he; " hello" keeps its space apart (no merge takes Ġ+hello).
  EXPECT_EQ(tokenizer->encode(" the hello"), (std::vector<int32_t>{262, 32, 259}));
  EXPECT_EQ(tokenizer->encode("The"), (std::vector<int32_t>{'T', 261}));
  EXPECT_EQ(tokenizer->encode("hello<|endoftext|>"), (std::vector<int32_t>{259, 268}));
  EXPECT_EQ(tokenizer->decode({259, 268, 267}), "hello world");
  for (const std::string &text : kTexts) EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  EXPECT_EQ(tokenizer->decode({0xe5, 0x8f}), kReplacementCharacter) << "a cut character is one U+FFFD";
}

TEST(ByteLevelBpe, SplitsAsGpt2AndLlama3Patterns) {
  const std::string text = "Hello world's 12345 !!\n\n  x DON'T naïve 日本語 ٣٤";
  EXPECT_EQ(splitByPattern(SplitPattern::Gpt2, text),
            (std::vector<std::string>{"Hello", " world", "'s", " 12345", " !!", "\n\n ", " x", " DON", "'", "T",
                                      " naïve", " 日本語", " ٣٤"}));
  EXPECT_EQ(splitByPattern(SplitPattern::Llama3, text),
            (std::vector<std::string>{"Hello", " world", "'s", " ", "123", "45", " !!\n\n", " ", " x", " DON", "'T",
                                      " naïve", " 日本語", " ", "٣٤"}));
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(knownSplitPattern(llama3), SplitPattern::Llama3);
  EXPECT_EQ(knownSplitPattern(R"(\w+)"), std::nullopt);

  test::TempDir directory;
  nlohmann::json split = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", llama3}}}, {"behavior", "Isolated"},
                             {"invert", false}},
                            {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  writeFileAtomically(directory.file("tokenizer.json"), byteLevelJson(split.dump()), "tokenizer");
  std::unique_ptr<Tokenizer> tokenizer = loadTokenizer(directory.file("tokenizer.json"));
  EXPECT_EQ(tokenizer->encode("hello world"), (std::vector<int32_t>{259, 267}));
  EXPECT_EQ(tokenizer->encode("1234"), (std::vector<int32_t>{'1', '2', '3', '4'}));
  for (const std::string &text : kTexts) EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
}

TEST(ByteLevelBpe, RefusesWhatItDoesNotReadByName) {
  test::TempDir directory;
  auto problem = [&](const std::string &json) {
    writeFileAtomically(directory.file("tokenizer.json"), json, "tokenizer");
    return errorMessage([&] { loadTokenizer(directory.file("tokenizer.json")); });
  };
  nlohmann::json json = nlohmann::json::parse(byteLevelJson(R"({"type": "ByteLevel"})"));
  json["normalizer"] = {{"type", "NFC"}};
  EXPECT_CONTAINS(problem(json.dump()), "normalizer {\"type\":\"NFC\"} is not supported");
  json["normalizer"] = nullptr;
  json["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}};
  EXPECT_CONTAINS(problem(json.dump()), "Split pre-tokenizer");
  json["pre_tokenizer"] = nullptr;
  json["model"]["type"] = "WordPiece";
  EXPECT_CONTAINS(problem(json.dump()), "model \"WordPiece\" is not supported");
  json["model"]["type"] = "BPE";
  json["model"]["merges"].push_back("q z");
  json["model"]["vocab"].erase("z");
  EXPECT_CONTAINS(problem(json.dump()), "merge 12 ('q' 'z'): 'z' is not in the vocabulary");
  EXPECT_CONTAINS(problem("{\"model\": "), "malformed JSON");
  json["model"]["merges"].erase(json["model"]["merges"].size() - 1);
  for (const nlohmann::json &start : {nlohmann::json(1e300), nlohmann::json(-1), nlohmann::json("1")}) {
    json["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", start}, {"stop", 0}};
    EXPECT_CONTAINS(problem(json.dump()), "'start' is " + start.dump() + ", expected a whole number");
  }
  json["decoder"] = {{"type", "ByteLevel"}};
  for (const nlohmann::json &id : {nlohmann::json(2.5), nlohmann::json(-3), nlohmann::json(int64_t(1) << 31)}) {
    nlohmann::json bad = json;
    bad["model"]["vocab"]["zz"] = id;
    EXPECT_CONTAINS(problem(bad.dump()), "vocab piece 'zz' has id " + id.dump() + ", expected 0 to 2^31 - 1");
    bad = json;
    bad["added_tokens"][0]["id"] = id;
    EXPECT_CONTAINS(problem(bad.dump()), "needs an id and a content");
  }
}

// Streamed one id at a time, the pieces add up to the whole decoding, and no piece ends
// inside a character (byte-fallback pieces of 漢 and 😀 arrive a byte at a time).
TEST_F(SentencePieceModel, StreamedTextNeverCutsACharacter) {
  for (const std::string &path : {modelPath(), jsonPath()}) {
    std::unique_ptr<Tokenizer> tokenizer = loadTokenizer(path);
    std::vector<int32_t> context = tokenizer->encode("free");
    std::vector<int32_t> ids = tokenizer->encode("free software: 漢字 and 😀 emoji");
    ids.erase(ids.begin(), ids.begin() + ptrdiff_t(context.size()));
    TextStream stream(*tokenizer, context);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = stream.add(id);
      EXPECT_EQ(piece.find(kReplacementCharacter), std::string::npos) << path;
      EXPECT_EQ(lossyUtf8(piece), piece) << "valid UTF-8";
      streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, " software: 漢字 and 😀 emoji") << path;
  }
}

TEST(Unicode, ClassesAndLossyDecoding) {
  for (char32_t letter : {U'a', U'Z', U'é', U'ß', U'漢', U'ж', U'ǅ'}) EXPECT_TRUE(isLetter(letter));
  for (char32_t number : {U'0', U'٣', U'²', U'Ⅻ', U'½'}) EXPECT_TRUE(isNumber(number));
  for (char32_t other : {U' ', U'!', U'😀', U'\u0301'}) EXPECT_FALSE(isLetter(other) || isNumber(other));
  for (char32_t space : {U' ', U'\t', U'\n', U'\u00a0', U'\u3000', U'\u2028'}) EXPECT_TRUE(isWhiteSpace(space));
  EXPECT_FALSE(isWhiteSpace(U'\u200b'));
  EXPECT_EQ(lossyUtf8("a\xe5\x8f"), std::string("a") + kReplacementCharacter);  // one for the cut character
  EXPECT_EQ(lossyUtf8("\xff\xc3\xa9"), std::string(kReplacementCharacter) + "é");
  EXPECT_EQ(lossyUtf8("\xed\xa0\x80"), std::string(kReplacementCharacter) + kReplacementCharacter + kReplacementCharacter);
  EXPECT_CONTAINS(errorMessage([] { decodeUtf8("ok\xc3", "the prompt"); }), "the prompt is not valid UTF-8 (byte 2 of 3)");
}

} // namespace
