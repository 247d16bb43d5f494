// disco-llm-server's HTTP side, on cpp-httplib (Debian's libcpp-httplib-dev): its thread pool
// reads requests, checks them (API key, JSON, lengths) and queues jobs for the scheduler, then
// writes each job's output as it comes, whole or as server-sent events. cpp-httplib rather than
// Boost.Beast: a blocking server with a thread pool, chunked streaming and body limits built in is
// all this server needs, in a few lines per route and without an asio event loop to keep.
#ifndef DISCO_MODELS_LLAMA_SERVER_HTTP_H_
#define DISCO_MODELS_LLAMA_SERVER_HTTP_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "llama/server/api.h"
#include "llama/server/job.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class ContentReader;
struct Request;
struct Response;
}  // namespace httplib

namespace llm_server {

class ChatRenderer;
class HttpServer;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;            // 0: a free port
  std::string model_name;  // what /v1/models and responses call the model
  std::string api_key;     // empty: no key asked for
  int64_t max_len = 0;     // positions a request may use: prompt + max_tokens
  int64_t vocab_size = 0;
  size_t max_body = 1 << 20;  // bytes of a request body (413 beyond)
  size_t threads = 512;       // requests served at once (an idle connection holds no thread)
};

/// At most `free` requests parsed (and their prompts encoded) at once: a request's JSON takes about
/// 20 bytes per byte of body while it is parsed (a 1 MiB list of token ids, 19 MB), so many large
/// bodies at once would take gigabytes.
struct ParseGate {
  std::mutex mu;
  std::condition_variable cv;
  int free = 4;
  class Hold {
   public:
    explicit Hold(ParseGate* g) : g_(g) { Wait(); }
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    void Wait();
    ParseGate* g_;
  };
};

class HttpFront {
 public:
  /// `chat` renders chat completions' prompts (null: 501 for them).
  HttpFront(HttpOptions o, tokenizer::Tokenizer tok, JobQueue* queue, ChatRenderer* chat = nullptr);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  /// Binds (throws disco::ValueError naming the address when it cannot) and starts serving on a
  /// thread of its own; returns the port.
  int Start();
  /// Refuses new requests (503) from now on.
  void StopAccepting() { accepting_ = false; }
  /// Stops the server once the responses in flight are written (a client that does not read its
  /// stream is given `kDrainSeconds`), and joins its thread. Call it after the scheduler has ended
  /// every job: a response waiting for output would wait out the whole grace.
  void Stop();

  static constexpr int kDrainSeconds = 10;

 private:
  void Routes();
  // The request's prompt as ids: its own, its text encoded, or its messages rendered and encoded
  // (then max_tokens, left out, runs to the end of --max-len).
  std::vector<int64_t> Prompt(CompletionRequest& r);
  // The request's body, at most max_body bytes (413 beyond), whatever its Content-Type.
  std::string ReadBody(const httplib::ContentReader& reader) const;
  // Queues the request with its prompt (Prompt's) and answers it, streamed or whole.
  void Complete(CompletionRequest r, std::vector<int64_t> prompt, httplib::Response& res);
  // A response in flight holds a ticket until it has been written (or its client has gone):
  // cpp-httplib's stop() cuts a chunked response short, so Stop waits for the tickets first.
  std::shared_ptr<void> Ticket();

  HttpOptions o_;
  tokenizer::Tokenizer tok_;
  JobQueue* queue_;
  ChatRenderer* chat_;
  ParseGate gate_;
  std::unique_ptr<HttpServer> svr_;
  std::thread thread_;
  std::atomic<bool> accepting_{true};
  std::atomic<int64_t> next_id_{0};
  std::mutex mu_;
  std::condition_variable drained_;
  int64_t in_flight_ = 0;
};

/// Compares a request's key with the server's in time that depends on the server's key's length
/// only.
bool KeyMatches(const std::string& expected, const std::string& given);

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_HTTP_H_
