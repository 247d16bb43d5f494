#include "llama/server/http.h"

#include <disco/error.h>
#include <httplib.h>

#include <strings.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "llama/server/api.h"
#include "llama/server/chat_renderer.h"
#include "llama/server/connection.h"

namespace llm_server {
namespace {

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(e.Body(), "application/json");
}

// The key of `Authorization: Bearer KEY`; the scheme's case does not matter (RFC 9110 11.1).
std::string BearerKey(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  if (auth.size() < 7 || strncasecmp(auth.c_str(), "bearer ", 7) != 0) return "";
  const size_t at = auth.find_first_not_of(' ', 7);
  return at == std::string::npos ? "" : auth.substr(at);
}

// What a streamed response shares between its provider's calls.
struct Stream {
  std::shared_ptr<void> ticket;  // held until the response is destroyed
  std::shared_ptr<Job> job;
  std::string id, model;
  int64_t created = 0, completion_tokens = 0;
  bool ended = false;
};

// Writes the next piece of `st` as an event (the last one and [DONE] at the end); false when the
// client has gone (the job is cancelled then).
bool WriteNext(Stream& st, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  Piece p;
  bool ok = true;
  if (st.job->Next(&p)) {
    st.completion_tokens += static_cast<int64_t>(p.ids.size());
    ok = write(ChunkEvent(st.id, st.created, st.model, st.job->request(), p,
                          static_cast<int64_t>(st.job->prompt().size()), st.completion_tokens));
    st.ended = !p.finish_reason.empty();
  } else {
    // Failed while streaming: the error object as an event, then the end.
    ok =
        write("data: " + ApiError(st.job->error_status(), st.job->error_message()).Body() + "\n\n");
    st.ended = true;
  }
  if (ok && st.ended) {
    ok = write("data: [DONE]\n\n");
    sink.done();
  }
  if (!ok) st.job->Cancel();
  return ok;
}

// Waits until `job` has a piece or has ended. Nothing is written meanwhile, so a client that has
// gone is seen by looking at its socket (`conn`; none: not looked at): its job is cancelled (its
// slot freed at the next step, as a stream's) and the answer is 499.
void AwaitPiece(Job* job, const Connection* conn) {
  while (!job->Ready(std::chrono::milliseconds(200))) {
    if (conn != nullptr && conn->PeerGone()) {
      job->Cancel();
      throw ApiError(499, "the client went away");
    }
  }
}

}  // namespace

bool KeyMatches(const std::string& expected, const std::string& given) {
  // Every byte of the expected key is compared, whatever the given key's length or content.
  unsigned diff = expected.size() == given.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned>(static_cast<unsigned char>(expected[i]) ^ g);
  }
  return diff == 0;
}

HttpFront::HttpFront(HttpOptions o, tokenizer::Tokenizer tok, JobQueue* queue, ChatRenderer* chat)
    : o_(std::move(o)),
      tok_(std::move(tok)),
      queue_(queue),
      chat_(chat),
      svr_(std::make_unique<HttpServer>([&] {
        ConnectionLimits l;
        l.max_request_bytes = o_.max_body + (64 << 10);  // the head's share
        l.max_threads = o_.threads;
        return l;
      }())) {
  Routes();
}

HttpFront::~HttpFront() { Stop(); }

int HttpFront::Start() {
  const int port = svr_->Bind(o_.host, o_.port);
  DISCO_CHECK(port > 0, ValueError)
      << "cannot listen on " << o_.host << ":" << o_.port << " ("
      << (errno != 0 ? std::strerror(errno) : "the host does not resolve to a local address")
      << "): give another --host or --port";
  thread_ = std::thread([this] { svr_->listen_after_bind(); });
  return port;
}

std::shared_ptr<void> HttpFront::Ticket() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
  return std::shared_ptr<void>(nullptr, [this](void*) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--in_flight_ == 0) drained_.notify_all();
  });
}

void HttpFront::Stop() {
  if (!thread_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_.wait_for(lock, std::chrono::seconds(kDrainSeconds),
                      [this] { return in_flight_ == 0; });
  }
  svr_->BeginStop();
  svr_->stop();
  thread_.join();
  svr_->FinishStop();
}

void HttpFront::Routes() {
  httplib::Server& s = *svr_;
  s.set_payload_max_length(o_.max_body);
  // A response without a body of ours (404, 413, 400 from the parser) gets OpenAI's error object.
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                  httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // The library's own answer (a request it could not parse or route): what follows on the
    // connection cannot be trusted to be a next request, so it ends after the answer.
    Connection* c = Connection::Current();
    if (c != nullptr && res.status != 404) c->CloseAfterThisRequest();
    if (c != nullptr && c->over_limit()) res.status = 413;  // a chunked body cut at the limit
    std::string what = "HTTP " + std::to_string(res.status);
    if (res.status == 414) what = "the request line is too long";
    if (res.status == 404) what = "no route " + req.method + " " + req.path;
    if (res.status == 413) {
      what = "the request is over the limit (" + std::to_string(o_.max_body) + " bytes of body)";
    }
    if (res.status == 400) what = "a malformed HTTP request";
    SendError(res, ApiError(res.status, what));
    return httplib::Server::HandlerResponse::Handled;
  }));
  // Before the body is read. A request answered here leaves its body unread: its connection is
  // closed after the answer (the body is not a next request).
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto answer = [&](const ApiError& e) {
      SendError(res, e);
      Connection* c = Connection::Current();
      if (c != nullptr &&
          (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))) {
        c->CloseAfterThisRequest();
        res.set_header("Connection", "close");
      }
      return httplib::Server::HandlerResponse::Handled;
    };
    // Framing that two parsers could read differently (a proxy in front and this one) is refused:
    // a request smuggled behind another is the risk.
    const std::string length = req.get_header_value("Content-Length");
    if (req.get_header_value_count("Content-Length") > 1 ||
        (req.has_header("Content-Length") &&
         (length.empty() || length.find_first_not_of("0123456789") != std::string::npos))) {
      return answer(ApiError(400, "Content-Length must be one number"));
    }
    if (req.has_header("Transfer-Encoding")) {
      if (req.has_header("Content-Length")) {
        return answer(ApiError(400, "a request with both Content-Length and Transfer-Encoding"));
      }
      if (strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") != 0 ||
          req.get_header_value_count("Transfer-Encoding") > 1) {
        return answer(ApiError(501, "Transfer-Encoding other than chunked"));
      }
    }
    if (req.has_header("Content-Length") &&
        (length.size() > 18 || std::stoull(length) > o_.max_body)) {
      return answer(ApiError(
          413, "the request body is over the limit (" + std::to_string(o_.max_body) + " bytes)"));
    }
    if (req.method == "POST" && !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding")) {
      return answer(ApiError(411, "a POST needs a Content-Length or a chunked body"));
    }
    if (req.path.compare(0, 4, "/v1/") == 0 && !o_.api_key.empty() &&
        !KeyMatches(o_.api_key, BearerKey(req))) {
      return answer(ApiError(401, "a wrong or missing API key (Authorization: Bearer KEY)"));
    }
    if (!accepting_.load()) return answer(ApiError(503, "the server is shutting down"));
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelsBody(o_.model_name, std::time(nullptr)), "application/json");
  });
  // The body is read here, whatever its Content-Type (the library would cap a form-encoded one,
  // curl -d's default, at 8 KiB), and never past max_body (a chunked one included).
  for (const bool chat : {false, true}) {
    s.Post(chat ? "/v1/chat/completions" : "/v1/completions",
           [this, chat](const httplib::Request&, httplib::Response& res,
                        const httplib::ContentReader& reader) {
             try {
               const std::string body = ReadBody(reader);
               CompletionRequest r;
               std::vector<int64_t> prompt;
               {
                 // Parsing takes ~20 bytes per byte of JSON; rendering and encoding a long prompt
                 // a core for a while: both under the gate.
                 ParseGate::Hold hold(&gate_);
                 r = chat ? ParseChat(body) : ParseCompletion(body);
                 prompt = Prompt(r);
               }
               Complete(std::move(r), std::move(prompt), res);
             } catch (const ApiError& e) {
               SendError(res, e);
             } catch (const disco::Error& e) {  // the tokenizer's, on text it cannot encode
               SendError(res, ApiError(400, std::string("'prompt': ") + e.what(), "prompt"));
             }
           });
  }
  // The known routes by another method: 405.
  const std::vector<std::pair<std::string, std::string>> known = {{"/health", "GET"},
                                                                  {"/v1/models", "GET"},
                                                                  {"/v1/completions", "POST"},
                                                                  {"/v1/chat/completions", "POST"}};
  for (const auto& [path, allowed] : known) {
    auto refuse = [allowed = allowed](const httplib::Request& req, httplib::Response& res) {
      SendError(res, ApiError(405, req.method + " " + req.path + ": use " + allowed));
      res.set_header("Allow", allowed);
    };
    if (allowed != "GET") s.Get(path, refuse);
    if (allowed != "POST") s.Post(path, refuse);
    s.Put(path, refuse);
    s.Delete(path, refuse);
    s.Patch(path, refuse);
  }
}

std::string HttpFront::ReadBody(const httplib::ContentReader& reader) const {
  std::string body;
  bool over = false;
  const bool whole = reader([&](const char* data, size_t n) {
    over = body.size() + n > o_.max_body;
    if (!over) body.append(data, n);
    return !over;
  });
  if (whole) return body;
  // The rest of the body is unread: the connection ends after the answer.
  if (Connection* c = Connection::Current()) c->CloseAfterThisRequest();
  if (over) {
    throw ApiError(
        413, "the request body is over the limit (" + std::to_string(o_.max_body) + " bytes)");
  }
  throw ApiError(400, "the request body did not arrive whole");
}

void ParseGate::Hold::Wait() {
  std::unique_lock<std::mutex> lock(g_->mu);
  g_->cv.wait(lock, [this] { return g_->free > 0; });
  --g_->free;
}

ParseGate::Hold::~Hold() {
  std::lock_guard<std::mutex> lock(g_->mu);
  ++g_->free;
  g_->cv.notify_one();
}

std::vector<int64_t> HttpFront::Prompt(CompletionRequest& r) {
  if (!r.chat) return r.prompt_is_text ? tok_.Encode(r.prompt_text, true) : r.prompt_ids;
  if (chat_ == nullptr) throw ApiError(501, "chat completions are not served by this server");
  // The template writes the special tokens (BOS, the turns' markers): none are added.
  r.prompt_text = chat_->Render(r.messages);
  std::vector<int64_t> prompt = tok_.Encode(r.prompt_text, false);
  if (prompt.empty()) {
    throw ApiError(400, "the chat template rendered the messages as no text: nothing to answer",
                   "messages");
  }
  const int64_t left = o_.max_len - static_cast<int64_t>(prompt.size());
  if (!r.max_tokens_given && left >= 1) r.max_tokens = left;
  return prompt;
}

void HttpFront::Complete(CompletionRequest r, std::vector<int64_t> prompt, httplib::Response& res) {
  for (int64_t id : prompt) {
    if (id >= o_.vocab_size) {
      throw ApiError(400,
                     "'prompt' holds token " + std::to_string(id) +
                         ", outside the vocabulary [0, " + std::to_string(o_.vocab_size) + ")",
                     "prompt");
    }
  }
  const int64_t need = static_cast<int64_t>(prompt.size()) + r.max_tokens;
  if (need > o_.max_len) {
    throw ApiError(400,
                   "the prompt (" + std::to_string(prompt.size()) + " tokens) and max_tokens (" +
                       std::to_string(r.max_tokens) + ") need " + std::to_string(need) +
                       " positions; this server's --max-len is " + std::to_string(o_.max_len),
                   "prompt");
  }
  auto st = std::make_shared<Stream>();
  st->ticket = Ticket();
  st->job = std::make_shared<Job>(r, std::move(prompt));
  st->id = (r.chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  st->model = o_.model_name;
  st->created = std::time(nullptr);
  if (!queue_->Push(st->job)) throw ApiError(503, "the server is shutting down");
  const Connection* conn = Connection::Current();
  if (r.stream) {
    // The status goes out with the headers, so they wait for the first piece: a request that
    // fails before it (a prompt past float16's range, a broken step) gets its own status, as a
    // request not streamed does; a failure after it comes as an error event.
    AwaitPiece(st->job.get(), conn);
    if (st->job->FailedBeforeOutput()) {
      throw ApiError(st->job->error_status(), st->job->error_message());
    }
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) { return st->ended || WriteNext(*st, sink); },
        [st](bool success) {
          if (!success) st->job->Cancel();
        });
    return;
  }
  // Not streamed: nothing is written until the end.
  Piece all, p;
  for (;;) {
    AwaitPiece(st->job.get(), conn);
    if (!st->job->Next(&p)) break;
    all.text += p.text;
    all.ids.insert(all.ids.end(), p.ids.begin(), p.ids.end());
    all.finish_reason = p.finish_reason;
  }
  if (st->job->error_status() != 0) {
    throw ApiError(st->job->error_status(), st->job->error_message());
  }
  res.set_content(CompletionBody(st->id, st->created, st->model, r, all,
                                 static_cast<int64_t>(st->job->prompt().size())),
                  "application/json");
}

}  // namespace llm_server
