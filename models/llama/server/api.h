// disco-llm-server's API in OpenAI's shapes: a completion request read from its JSON body (every
// field checked, a wrong one an ApiError naming it), and the JSON of responses, stream chunks and
// errors (OpenAI's error object: {"error": {"message", "type", "param", "code"}}).
#ifndef DISCO_MODELS_LLAMA_SERVER_API_H_
#define DISCO_MODELS_LLAMA_SERVER_API_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace llm_server {

/// An HTTP error with OpenAI's error object.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  /// {"error": {...}}: the type follows the status (invalid_request_error, authentication_error,
  /// not_found_error, server_error).
  std::string Body() const;

 private:
  int status_;
  std::string param_;
};

/// POST /v1/completions or /v1/chat/completions, as read.
struct CompletionRequest {
  bool chat = false;     // /v1/chat/completions: the prompt is rendered from `messages`
  std::string messages;  // chat: [{"role", "content"}, ...] as checked, one JSON line
  std::string model;
  bool prompt_is_text = false;
  std::string prompt_text;          // prompt_is_text
  std::vector<int64_t> prompt_ids;  // else: used as is
  int64_t max_tokens = 16;          // chat: to the end of --max-len unless given
  bool max_tokens_given = false;
  bool stream = false;
  bool ignore_eos = false;  // run to max_tokens past an end-of-sequence token (vLLM's option)
  bool return_token_ids = false;
  std::vector<std::string> stop;
  double temperature = 0;  // 0: greedy
  double top_p = 1;        // with temperature: the nucleus, (0, 1] (1: the whole vocabulary)
  int64_t seed = 0;        // with temperature: the draws' seed (seed_given), else a random one
  bool seed_given = false;
};

/// Reads a completion request; throws ApiError (400) naming the field for malformed JSON, a wrong
/// type, a value out of range or an option this server does not implement (n other than 1).
CompletionRequest ParseCompletion(const std::string& body);
/// Reads a chat completion request: `messages` (roles and text content; tool calls and parts
/// other than text refused), `max_tokens` or `max_completion_tokens`, and the options above.
CompletionRequest ParseChat(const std::string& body);

/// One choice's piece of output: text, the ids it came from, and the finish reason when it is the
/// last ("stop" or "length").
struct Piece {
  std::string text;
  std::vector<int64_t> ids;
  std::string finish_reason;
};

/// The whole response of a request that is not streamed (a chat completion's when req.chat).
std::string CompletionBody(const std::string& id, int64_t created, const std::string& model,
                           const CompletionRequest& req, const Piece& all, int64_t prompt_tokens);
/// One server-sent event: "data: {...}\n\n"; with usage (the last chunk) the counts too.
std::string ChunkEvent(const std::string& id, int64_t created, const std::string& model,
                       const CompletionRequest& req, const Piece& piece, int64_t prompt_tokens,
                       int64_t completion_tokens);
/// GET /v1/models.
std::string ModelsBody(const std::string& model, int64_t created);

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_API_H_
