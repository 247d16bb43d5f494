#include "llama/server/server.h"

#include <arpa/inet.h>
#include <disco/disco.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "llama/config.h"
#include "llama/model.h"
#include "llama/safetensors.h"
#include "llama/server/chat_renderer.h"
#include "llama/server/engine.h"
#include "llama/server/http.h"
#include "llama/server/key_file.h"
#include "tokenizer/tokenizer.h"

namespace llm_server {
namespace {

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// SIGTERM and SIGINT on rank 0: the handler posts a semaphore (async-signal-safe), whichever
// thread the signal reaches; a thread of the waiter's, which alone unblocks them, waits for it and
// runs `on_stop`. (Blocking them in every thread and a sigwait did not hold under srun --mpi=pmix:
// a thread of the MPI library's took SIGTERM and the runtime's handler ended the rank.) The
// destructor ends the wait if no signal came.
sem_t g_stop_signal;
void PostStop(int) { sem_post(&g_stop_signal); }

class SignalWaiter {
 public:
  explicit SignalWaiter(std::function<void()> on_stop) {
    sem_init(&g_stop_signal, 0, 0);
    struct sigaction sa {};
    sa.sa_handler = PostStop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
    thread_ = std::thread([this, on_stop = std::move(on_stop)] {
      const sigset_t set = StopSignals();
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      while (sem_wait(&g_stop_signal) != 0) {
      }
      if (!quitting_.load()) on_stop();
    });
  }
  ~SignalWaiter() {
    quitting_ = true;
    sem_post(&g_stop_signal);
    thread_.join();
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    sem_destroy(&g_stop_signal);
  }
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

 private:
  std::atomic<bool> quitting_{false};
  struct sigaction old_term_ {
  }, old_int_{};
  std::thread thread_;
};

// On every rank but 0, first thing: SIGTERM and SIGINT ignored. Rank 0 takes them
// (SignalWaiter; one that came before stays pending until then), and the other ranks' loops end
// when its controller ends the session: a launcher's SIGTERM to every rank (scancel, srun,
// mpirun) stops the server as a whole, cleanly.
DISCO_REGISTER_GLOBAL("llm_server.ignore_stop_signals").set_body_typed([]() {
  if (disco::ThisWorker().worker_id == 0) return;
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
});

// The ids that end an answer, as transformers' generate takes them: generation_config.json's
// eos_token_id and config.json's (each a number or a list), all of them.
std::vector<int64_t> EosIdsOf(const llama::Checkpoint& ck, const std::string& dir) {
  std::vector<int64_t> ids;
  auto add = [&](const std::string& text, const std::string& file) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    DISCO_CHECK(j.is_object(), ValueError) << file << ": not a JSON object";
    if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return;
    const nlohmann::json& e = j["eos_token_id"];
    for (const nlohmann::json& id : e.is_array() ? e : nlohmann::json::array({e})) {
      DISCO_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                      id.get<int64_t>() < ck.config().vocab_size,
                  ValueError)
          << file << ": eos_token_id " << e.dump()
          << " is not a token id (or a list of them) in [0, " << ck.config().vocab_size << ")";
      ids.push_back(id.get<int64_t>());
    }
  };
  add(ck.config_text(), dir + "/config.json");
  const std::string gen = dir + "/generation_config.json";
  struct stat st {};
  if (lstat(gen.c_str(), &st) == 0) add(llama::ReadFile(gen), gen);
  return ids;
}

// What SIGTERM or SIGINT does, from the start: before the server listens, the start-up ends at
// its next step (a model still loading, a chat renderer still starting, finish first); then the
// action set once the server runs.
class Stopper {
 public:
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    if (action_) action_();
  }
  bool stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopped_;
  }
  // Sets (or, empty, clears) the action; runs it at once when a signal came already.
  void Set(std::function<void()> action) {
    std::lock_guard<std::mutex> lock(mu_);
    action_ = std::move(action);
    if (stopped_ && action_) action_();
  }

 private:
  std::mutex mu_;
  bool stopped_ = false;
  std::function<void()> action_;
};

int StoppedEarly() {
  std::printf("disco-llm-server: stopped before listening\n");
  std::fflush(stdout);
  return 0;
}

// Whether every address `host` names is a loopback one (127.0.0.0/8, ::1): 127.1 and localhost
// are, 0.0.0.0 and :: (every interface) are not.
bool OnlyLoopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool loopback = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopback = loopback && (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loopback = loopback && IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
    } else {
      loopback = false;
    }
  }
  freeaddrinfo(found);
  return loopback;
}

// Every connection is a descriptor, idle ones included (connection.h): the soft limit on open
// files (often 1024) goes up to the hard one, as web servers do, so that a thousand clients at
// once are not refused. Says so when it cannot.
void RaiseOpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  const rlim_t was = files.rlim_cur;
  files.rlim_cur = files.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
    std::fprintf(stderr,
                 "disco-llm-server: warning: cannot raise the open-file limit from %llu: at most "
                 "about that many connections at once\n",
                 static_cast<unsigned long long>(was));
  }
}

int Serve(disco::Session& s, const ServerOptions& o) {
  RaiseOpenFileLimit();
  s.CallPacked(s.GetGlobalFunc("llm_server.ignore_stop_signals"));
  s.SyncAll();
  Stopper stopper;
  SignalWaiter waiter([&] { stopper.Stop(); });
  DISCO_CHECK(!o.host.empty(), ValueError)
      << "--host is empty: give the address to listen on (127.0.0.1, ::1, or 0.0.0.0 for every "
         "interface)";
  DISCO_CHECK(o.max_len != 1, ValueError)
      << "--max-len 1 leaves no position to generate in: a request needs one for each prompt "
         "token and one for each token it generates (give 2 or more, or 0 for the checkpoint's "
         "max_position_embeddings)";
  HttpOptions h;
  h.host = o.host;
  h.port = o.port;
  if (!o.api_key_file.empty()) h.api_key = ReadKeyFile(o.api_key_file);
  const std::string why = llama::StatError(o.model);
  DISCO_CHECK(why.empty(), ValueError) << "--model " << o.model << ": " << why;
  DISCO_CHECK(llama::IsDirectory(o.model), ValueError)
      << "--model " << o.model
      << ": give a Hugging Face checkpoint directory (config.json, safetensors and the tokenizer)";
  // Checked here first, for one clear message; the checkpoint (its files open) is let go once its
  // config and end-of-sequence ids are read, not held for the server's life.
  std::optional<llama::Checkpoint> ck(llama::Checkpoint::Open(o.model));
  ck->config().CheckSplit(s.num_workers());
  ck->CheckWeights();
  const llama::Config c = ck->config();
  const std::vector<int64_t> eos = EosIdsOf(*ck, o.model);
  ck.reset();
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromDirectory(o.model, c.vocab_size);
  h.vocab_size = c.vocab_size;
  DISCO_CHECK(o.max_len <= c.max_position_embeddings, ValueError)
      << "--max-len " << o.max_len << " is over the checkpoint's max_position_embeddings ("
      << c.max_position_embeddings << "): the model was not made for positions past it";
  h.max_len = o.max_len > 0 ? o.max_len : c.max_position_embeddings;
  h.model_name = o.model.substr(o.model.find_last_of('/', o.model.size() - 2) + 1);
  while (h.model_name.size() > 1 && h.model_name.back() == '/') h.model_name.pop_back();

  for (const std::string& name : llama::WorkerFunctionNames()) s.GetGlobalFunc(name);
  s.InitCCL("mpi");
  disco::DRef model = s.CallPacked(s.GetGlobalFunc("llama.open"), o.model, o.dtype);
  s.SyncAll();
  if (stopper.stopped()) return StoppedEarly();
  Engine engine(s, model, c, tok, eos, static_cast<size_t>(o.max_batch), h.max_len, o.kv_dtype);
  JobQueue queue;
  ChatRenderer chat(o.model, [&] { return stopper.stopped(); });
  if (stopper.stopped()) return StoppedEarly();
  HttpFront front(h, tok, &queue, &chat);
  std::atomic<bool> stop{false};
  stopper.Set([&] {
    front.StopAccepting();
    stop = true;
    queue.Wake();
  });
  // Cleared before what it names goes (the waiter outlives them).
  struct Clear {
    Stopper* s;
    ~Clear() { s->Set(nullptr); }
  } clear{&stopper};
  const int port = front.Start();
  if (!OnlyLoopback(o.host)) {
    std::fprintf(stderr,
                 "disco-llm-server: warning: --host %s: requests, their text and the API key "
                 "travel in clear text (no TLS); reach the server over a trusted network or an SSH "
                 "tunnel\n",
                 o.host.c_str());
  }
  std::printf(
      "disco-llm-server: %s (%s), %d rank(s), %s, kv cache %s, --max-batch %lld --max-len %lld\n",
      o.model.c_str(), c.Summary().c_str(), s.num_workers(), o.dtype.c_str(), o.kv_dtype.c_str(),
      static_cast<long long>(o.max_batch), static_cast<long long>(h.max_len));
  std::printf("disco-llm-server: %s\n", chat.status().c_str());
  // An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:PORT.
  const bool v6 = o.host.find(':') != std::string::npos;
  std::printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", o.host.c_str(), v6 ? "]" : "",
              port);
  std::fflush(stdout);
  std::function<void()> idle;
  if (o.idle) idle = [&] { o.idle(s); };
  engine.Serve(&queue, stop, idle);
  front.Stop();
  std::printf("disco-llm-server: stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace

int ServerMain(int argc, char** argv, const ServerOptions& o) {
  // Blocked in the threads MPI and disco start (they inherit the mask), until Serve has every rank
  // ignore them and rank 0's waiter take them.
  const sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return disco::Main(argc, argv, [&](disco::Session& s) {
    try {
      return Serve(s, o);
    } catch (const disco::Error& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "disco-llm-server: %s\n", e.what());
      return 1;
    }
  });
}

}  // namespace llm_server
