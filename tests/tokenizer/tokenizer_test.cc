// models/tokenizer: bad tokenizer files, each refused with one line naming the file and what is
// wrong, and the streaming decoder holding back characters split over byte tokens.
#include <disco/error.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace {

using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;

class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/disco-tok-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    files_.push_back(path);
    return path;
  }
  // A byte-fallback BPE: a, b, ab, <unk>, and <0xNN> for every byte, ids 0..259.
  static std::string Json(const std::string& model_extra = "", const std::string& top_extra = "",
                          const std::string& merges = R"(["a b"])") {
    std::string vocab = R"("<unk>": 0, "a": 1, "b": 2, "ab": 3)";
    for (int b = 0; b < 256; ++b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, R"(, "<0x%02X>": %d)", b, 4 + b);
      vocab += buf;
    }
    return R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null,)"
           R"( "post_processor": null, )" +
           top_extra + R"("decoder": {"type": "ByteFallback"}, "model": {"type": "BPE", )" +
           model_extra + R"("unk_token": "<unk>", "byte_fallback": true, "vocab": {)" + vocab +
           R"(}, "merges": )" + merges + "}}";
  }
  // Expects `f` to throw one line that holds every fragment.
  static void ExpectError(const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one with '" << parts[0] << "'";
    } catch (const disco::ValueError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
    }
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(TokenizerFiles, AGoodOneEncodesAndDecodes) {
  Tokenizer t = Tokenizer::FromFile(Write("tokenizer.json", Json()));
  EXPECT_EQ(t.Encode("abab"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(t.Encode("ac"), (std::vector<int64_t>{1, 4 + 'c'}));
  EXPECT_EQ(t.Decode({3, 1, 4 + 'c', 9999}), "abac");  // an id without a token is left out
  EXPECT_EQ(Tokenizer::FileIn(dir_), dir_ + "/tokenizer.json");
  // "ba", a token no merge makes: whole with ignore_merges (Llama 3's), else by characters.
  std::string j = Json(R"("ignore_merges": true, )");
  j.replace(j.find(R"("ab": 3)"), 7, R"("ab": 3, "ba": 260)");
  EXPECT_EQ(Tokenizer::FromFile(Write("t2.json", j)).Encode("ba"), (std::vector<int64_t>{260}));
  j.replace(j.find(R"("ignore_merges": true)"), 21, R"("ignore_merges": false)");
  EXPECT_EQ(Tokenizer::FromFile(Write("t3.json", j)).Encode("ba"), (std::vector<int64_t>{2, 1}));
}

TEST_F(TokenizerFiles, MalformedJson) {
  const std::string path = Write("tokenizer.json", R"({"model": {"type": "BPE",})");
  ExpectError([&] { Tokenizer::FromFile(path); }, {path, "malformed JSON at byte 26"});
  const std::string bad_utf8 = Write("t2.json", "{\"model\": \"\xff\"}");
  ExpectError([&] { Tokenizer::FromFile(bad_utf8); }, {bad_utf8, "malformed JSON"});
  const std::string deep = Write("t4.json", std::string(100000, '[') + std::string(100000, ']'));
  ExpectError([&] { Tokenizer::FromFile(deep); }, {deep, "nested deeper than 64 levels"});
  const std::string array = Write("t3.json", "[1]");
  ExpectError([&] { Tokenizer::FromFile(array); }, {array, "not an object"});
  // A number past double's range is the parser's out_of_range, not a parse_error.
  const std::string huge = Write("t5.json", R"({"version": 1e999})");
  ExpectError([&] { Tokenizer::FromFile(huge); }, {huge, "malformed JSON: number overflow"});
  ExpectError([&] { Tokenizer::FromFile(array, -1); }, {array, "vocab_size -1 is negative"});
}

TEST_F(TokenizerFiles, UnsupportedTypesNameTheirPath) {
  std::string j = Json();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = j;
    s.replace(s.find(from), from.size(), to);
    return Write("tokenizer.json", s);
  };
  std::string p =
      with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [)"
                                       R"({"type": "Digits"}, {"type": "Punctuation"}]})");
  ExpectError([&] { Tokenizer::FromFile(p); },
              {p, "pre_tokenizer.pretokenizers[1].type: unsupported pre-tokenizer 'Punctuation'"});
  p = with(R"("normalizer": null)", R"("normalizer": {"type": "Lowercase"})");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "normalizer.type: unsupported normalizer"});
  p = with(R"("decoder": {"type": "ByteFallback"})", R"("decoder": {"type": "WordPiece"})");
  ExpectError([&] { Tokenizer::FromFile(p); },
              {p, "decoder.type: unsupported decoder 'WordPiece'"});
  p = with(R"("type": "BPE")", R"("type": "Unigram")");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "model.type: unsupported model 'Unigram'"});
  p = with(R"("post_processor": null)", R"("post_processor": {"type": "BertProcessing"})");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "post_processor.type: unsupported"});
  p = with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Split", "pattern": )"
                                       R"({"Regex": "(a"}, "behavior": "Isolated"})");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "pre_tokenizer.pattern", "does not compile"});
  p = with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Split", "pattern": )"
                                       R"({"Regex": "(a|aa)+$"}, "behavior": "Isolated"})");
  Tokenizer slow = Tokenizer::FromFile(p);
  ExpectError([&] { slow.Encode(std::string(64, 'a') + "b"); },
              {"pre_tokenizer.pattern", "fails on a text of 65 bytes"});
  p = with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Split", "pattern": )"
                                       R"({"Regex": "x*"}, "behavior": "Isolated"})");
  ExpectError([&] { Tokenizer::FromFile(p); },
              {p, "pre_tokenizer.pattern", "can match the empty string"});
  p = with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": 7})");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "pre_tokenizer.type: is a number"});
}

TEST_F(TokenizerFiles, ModelOptionsThatChangeTheIdsAreRefused) {
  std::string p = Write("tokenizer.json", Json(R"("dropout": 0.1, )"));
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "model.dropout", "not supported"});
  p = Write("tokenizer.json", Json(R"("continuing_subword_prefix": "##", )"));
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "model.continuing_subword_prefix"});
  p = Write("tokenizer.json", Json("", R"("truncation": {"max_length": 5}, )"));
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "truncation: is not supported"});
}

TEST_F(TokenizerFiles, VocabularyAndMergesMustAgree) {
  std::string p = Write("tokenizer.json", Json("", "", R"(["a x"])"));
  ExpectError([&] { Tokenizer::FromFile(p); },
              {p, "model.merges[0]: merge 'a x': 'x' is not in model.vocab"});
  p = Write("tokenizer.json", Json("", "", R"([["b", "a"]])"));
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "'ba' is not in model.vocab"});
  p = Write("tokenizer.json", Json("", "", R"(["a\nb c"])"));  // a newline: one line still
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "'a\\nb' is not in model.vocab"});
  p = Write("tokenizer.json", Json("", "", R"(["a b c"])"));
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "not two tokens"});
  std::string dup = Json();
  dup.replace(dup.find(R"("ab": 3)"), 7, R"("ab": 2)");
  p = Write("tokenizer.json", dup);
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "model.vocab[\"b\"]: id 2 is also 'ab'"});
  std::string neg = Json();
  neg.replace(neg.find(R"("ab": 3)"), 7, R"("ab": -3)");
  p = Write("tokenizer.json", neg);
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "model.vocab[\"ab\"]: is -3, not a token id"});
}

TEST_F(TokenizerFiles, IdsBeyondTheModelsVocabulary) {
  const std::string p = Write("tokenizer.json", Json());
  ExpectError([&] { Tokenizer::FromFile(p, 100); },
              {p, "token '<0xFF>' has id 259, beyond the model's vocabulary", "vocab_size 100"});
  EXPECT_NO_THROW(Tokenizer::FromFile(p, 260));
}

TEST_F(TokenizerFiles, SentencePieceModels) {
  std::string p = Write("tokenizer.model", "\x0a\x05trunc");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "not a SentencePiece model that loads"});
  p = Write("empty.model", "");
  ExpectError([&] { Tokenizer::FromFile(p); }, {p, "not a SentencePiece model that loads"});
}

TEST_F(TokenizerFiles, DirectoryWithoutATokenizer) {
  ExpectError([&] { Tokenizer::FromDirectory(dir_); },
              {dir_, "no tokenizer (looked for tokenizer.json and tokenizer.model)"});
  ExpectError([&] { Tokenizer::FromFile(dir_); }, {dir_, "not a regular file"});
}

// "a😀b" as a, four byte tokens, b: the emoji shows when its last byte has come, and "b" with it.
TEST_F(TokenizerFiles, StreamHoldsBackACharacterSplitOverByteTokens) {
  Tokenizer t = Tokenizer::FromFile(Write("tokenizer.json", Json()));
  const std::vector<int64_t> ids = t.Encode(
      "a\xF0\x9F\x98\x80"
      "b");
  ASSERT_EQ(ids, (std::vector<int64_t>{1, 4 + 0xF0, 4 + 0x9F, 4 + 0x98, 4 + 0x80, 2}));
  StreamDecoder s(t);
  std::vector<std::string> shown;
  for (int64_t id : ids) shown.push_back(s.Push(id));
  const std::string emoji_b = std::string("\xF0\x9F\x98\x80") + "b";
  EXPECT_EQ(shown, (std::vector<std::string>{"a", "", "", "", "", emoji_b}));
  EXPECT_EQ(s.Finish(), "");
  // Cut short: the incomplete bytes come out as U+FFFD each, as tokenizers' ByteFallback has it.
  StreamDecoder cut(t);
  EXPECT_EQ(cut.Push(1), "a");
  EXPECT_EQ(cut.Push(4 + 0xF0), "");
  EXPECT_EQ(cut.Push(4 + 0x9F), "");
  EXPECT_EQ(cut.Finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Byte-level BPE: the bytes of an emoji in single-byte tokens; the text up to it shows at once.
TEST_F(TokenizerFiles, StreamHoldsBackPartialUtf8OfByteLevelTokens) {
  const auto& map = tokenizer::ByteToChar();
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    nlohmann::json key = map[b];
    vocab += (b ? ", " : "") + key.dump() + ": " + std::to_string(b);
  }
  const std::string p =
      Write("tokenizer.json",
            R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, "decoder": )"
            R"({"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {)" +
                vocab + R"(}, "merges": []}})");
  Tokenizer t = Tokenizer::FromFile(p);
  const std::vector<int64_t> ids = t.Encode("x\xF0\x9F\x98\x80");
  ASSERT_EQ(ids, (std::vector<int64_t>{'x', 0xF0, 0x9F, 0x98, 0x80}));
  StreamDecoder s(t);
  EXPECT_EQ(s.Push('x'), "x");
  EXPECT_EQ(s.Push(0xF0), "");
  EXPECT_EQ(s.Push(0x9F), "");
  EXPECT_EQ(s.Push(0x98), "");
  EXPECT_EQ(s.Push(0x80), "\xF0\x9F\x98\x80");
  StreamDecoder cut(t);
  EXPECT_EQ(cut.Push(0xF0), "");
  EXPECT_EQ(cut.Finish(), "\xEF\xBF\xBD");
}

}  // namespace
