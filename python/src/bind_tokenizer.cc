// disco.Tokenizer: a checkpoint's tokenizer (models/tokenizer: tokenizer.json or tokenizer.model)
// for Python controllers, e.g. examples/generate.py. Without the tokenizer library in the build,
// the class is there and its constructor says what the build lacks.
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "module.h"
#ifdef DISCO_PYTHON_TOKENIZER
#include "tokenizer/tokenizer.h"
#endif

namespace disco {
namespace python {

#ifdef DISCO_PYTHON_TOKENIZER
using TokenizerType = tokenizer::Tokenizer;
#else
struct TokenizerType {};
#endif

void BindTokenizer(py::module_& m) {
  py::class_<TokenizerType>(m, "Tokenizer",
                            "The tokenizer of a Hugging Face checkpoint directory: tokenizer.json, "
                            "else tokenizer.model; encodes and decodes as Hugging Face's "
                            "tokenizers and sentencepiece do (docs/demo.md, 'Text in, text out').")
      .def(py::init([](const std::string& dir, int64_t vocab_size) {
             (void)vocab_size;
#ifdef DISCO_PYTHON_TOKENIZER
             return tokenizer::Tokenizer::FromDirectory(dir, vocab_size);
#else
             DISCO_THROW(ValueError) << "disco.Tokenizer(" << dir << "): disco was built without "
                                     << "its tokenizer library (libpcre2-dev, "
                                     << "libsentencepiece-dev, libutf8proc-dev)";
             return TokenizerType{};
#endif
           }),
           py::arg("dir"), py::arg("vocab_size") = 0,
           "Reads DIR/tokenizer.json or DIR/tokenizer.model; with vocab_size > 0 (config.json's), "
           "every id must be below it. ValueError names the file and what is wrong.")
      .def(
          "encode",
          [](const TokenizerType& t, const std::string& text, bool add_special_tokens) {
#ifdef DISCO_PYTHON_TOKENIZER
            py::gil_scoped_release release;
            return t.Encode(text, add_special_tokens);
#else
            (void)t, (void)text, (void)add_special_tokens;
            return std::vector<int64_t>{};
#endif
          },
          py::arg("text"), py::arg("add_special_tokens") = true,
          "The ids of TEXT (str, or bytes read as UTF-8 with errors replaced); with "
          "add_special_tokens, the tokenizer's BOS as Hugging Face adds it.")
      .def(
          "decode",
          [](const TokenizerType& t, const std::vector<int64_t>& ids, bool skip_special_tokens) {
#ifdef DISCO_PYTHON_TOKENIZER
            std::string text;
            {
              py::gil_scoped_release release;
              text = t.Decode(ids, skip_special_tokens);
            }
#else
            (void)t, (void)ids, (void)skip_special_tokens;
            std::string text;
#endif
            return py::reinterpret_steal<py::str>(
                PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false,
          "The text of IDS (ids without a token are left out; invalid UTF-8 is U+FFFD).")
      .def("__repr__", [](const TokenizerType& t) {
#ifdef DISCO_PYTHON_TOKENIZER
        return "disco.Tokenizer('" + t.path() + "')";
#else
        (void)t;
        return std::string("disco.Tokenizer()");
#endif
      });
}

}  // namespace python
}  // namespace disco
