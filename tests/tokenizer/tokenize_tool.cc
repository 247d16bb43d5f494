// disco_tokenize: the tokenizer library (models/tokenizer) from the command line, for
// check_tokenizers.py, which compares it with Hugging Face's tokenizers and sentencepiece.
//   disco_tokenize encode FILE RECORDS  each record's ids, with and without special tokens, and
//                                       the decode of the first as hex bytes; lines
//                                       "<ids with> | <ids without> | <hex>"
//   disco_tokenize decode FILE RECORDS  each record is ids separated by spaces: the hex of their
//                                       decode, their streamed decode, and the decode without
//                                       special tokens, "|"-separated
// A records file is "<length>\n<bytes>" repeated. Errors: one line on stderr, exit 1.
#include <disco/error.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> ReadRecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> out;
  std::string len;
  while (std::getline(in, len)) {
    std::string rec(std::stoul(len), '\0');
    in.read(rec.data(), static_cast<std::streamsize>(rec.size()));
    out.push_back(rec);
  }
  return out;
}

std::string Hex(const std::string& s) {
  std::string out;
  char buf[3];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out.empty() ? "-" : out;
}

std::string Ids(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

int Run(int argc, char** argv) {
  DISCO_CHECK(argc == 4, ValueError) << "usage: disco_tokenize encode|decode FILE RECORDS";
  const std::string mode = argv[1];
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromFile(argv[2]);
  for (const std::string& rec : ReadRecords(argv[3])) {
    if (mode == "encode") {
      const std::vector<int64_t> with = tok.Encode(rec, true);
      std::printf("%s | %s | %s\n", Ids(with).c_str(), Ids(tok.Encode(rec, false)).c_str(),
                  Hex(tok.Decode(with)).c_str());
    } else {
      std::vector<int64_t> ids;
      std::istringstream words(rec);
      for (int64_t id; words >> id;) ids.push_back(id);
      tokenizer::StreamDecoder stream(tok);
      std::string streamed;
      for (int64_t id : ids) streamed += stream.Push(id);
      streamed += stream.Finish();
      std::printf("%s | %s | %s\n", Hex(tok.Decode(ids)).c_str(), Hex(streamed).c_str(),
                  Hex(tok.Decode(ids, true)).c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const disco::Error& e) {
    std::fprintf(stderr, "disco_tokenize: %s\n", e.what());
    return 1;
  }
}
