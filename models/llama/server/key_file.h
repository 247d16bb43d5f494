// disco-llm-server --api-key-file: the key read safely (a regular file of this user that no one
// else can read, not a link, at most 4 KiB; one line, trailing whitespace dropped).
#ifndef DISCO_MODELS_LLAMA_SERVER_KEY_FILE_H_
#define DISCO_MODELS_LLAMA_SERVER_KEY_FILE_H_

#include <string>

namespace llm_server {

/// The key in `path`; throws disco::ValueError naming the file and what is wrong with it.
std::string ReadKeyFile(const std::string& path);

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_KEY_FILE_H_
