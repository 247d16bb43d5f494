#include "llama/server/chat_renderer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "llama/server/api.h"

extern char** environ;

namespace llm_server {
namespace {

bool IsFile(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool SendAll(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    // A socket, not a pipe: a child that has died is an error here, not a SIGPIPE.
    const ssize_t n = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string FindChatScript() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.find_last_of('/'));
    const std::string python_dir = DISCO_PYTHON_INSTALL_DIR;  // relative to the prefix, or not
    const std::string installed =
        (python_dir[0] == '/' ? python_dir : dir + "/../" + python_dir) + "/disco/chat.py";
    if (IsFile(installed)) return installed;
  }
#ifdef DISCO_BUILD_CHAT_SCRIPT
  if (IsFile(DISCO_BUILD_CHAT_SCRIPT)) return DISCO_BUILD_CHAT_SCRIPT;
#endif
  return "";
}

ChatRenderer::ChatRenderer(std::string model_dir, std::function<bool()> give_up)
    : model_dir_(std::move(model_dir)), give_up_(std::move(give_up)) {
  script_ = FindChatScript();
  if (script_.empty()) {
    unavailable_ = "chat completions need disco's Python package (chat.py), not installed here";
    unavailable_code_ = 501;
  } else if (!Start()) {
    unavailable_ = start_error_.empty()
                       ? "the chat renderer (python3 " + script_ + ") did not start"
                       : start_error_;
    unavailable_code_ = no_template_ ? 400 : 501;
  }
  give_up_ = nullptr;  // for the start only: a render in flight at a stop finishes
  status_ = unavailable_.empty() ? "chat template from " + template_file_
                                 : "chat not served: " + unavailable_;
}

ChatRenderer::~ChatRenderer() { Kill(); }

bool ChatRenderer::Start() {
  start_error_.clear();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    start_error_ = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // the server blocks SIGTERM/SIGINT; the child not
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> args = {"python3", "-I", "-B", script_, "--serve", model_dir_};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawnp(&pid_, "python3", &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(sv[1]);
  fd_ = sv[0];
  if (rc != 0) {
    pid_ = -1;
    start_error_ = std::string("cannot run python3: ") + std::strerror(rc);
    Kill();
    return false;
  }
  std::string line;
  if (ReadLine(60, &line) != Read::kLine) {  // python3 and Jinja2 start, on a loaded machine
    Kill();
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.value("ready", false)) {
    start_error_ = j.is_object() ? j.value("error", line) : line;
    Kill();
    return false;
  }
  if (!j.contains("template") || !j["template"].is_string()) {
    start_error_ = j.value("error", std::string("the checkpoint has no chat template"));
    no_template_ = true;
    Kill();
    return false;
  }
  template_file_ = j["template"].get<std::string>();
  return true;
}

void ChatRenderer::Kill() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  pending_.clear();
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

ChatRenderer::Read ChatRenderer::ReadLine(int seconds, std::string* line) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    const size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      *line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return Read::kLine;
    }
    if (pending_.size() > kMaxReplyBytes) return Read::kTooLong;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (left.count() <= 0 || (give_up_ && give_up_())) return Read::kTimeout;
    // Slices of 200 ms: a stop is seen soon.
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) continue;
    if (n < 0) return Read::kEnded;
    char buf[65536];
    const ssize_t got = recv(fd_, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Read::kEnded;
    pending_.append(buf, static_cast<size_t>(got));
  }
}

std::string ChatRenderer::Render(const std::string& messages) {
  if (!unavailable_.empty()) throw ApiError(unavailable_code_, unavailable_);
  std::lock_guard<std::mutex> lock(mu_);
  // A child that has died since (killed, out of memory) is replaced before it is asked.
  if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == pid_) {
    pid_ = -1;
    Kill();
  }
  if (pid_ < 0 && !Start()) {
    throw ApiError(500, "the chat renderer did not start again: " + start_error_);
  }
  std::string line;
  const Read got = SendAll(fd_, "{\"messages\": " + messages + "}\n")
                       ? ReadLine(kRenderSeconds, &line)
                       : Read::kEnded;
  if (got != Read::kLine) {
    Kill();  // the next request starts another
    switch (got) {
      case Read::kTimeout:
        throw ApiError(500, "the chat template did not render within " +
                                std::to_string(kRenderSeconds) + " s");
      case Read::kTooLong:
        throw ApiError(
            400,
            "the chat template rendered more than " + std::to_string(kMaxReplyBytes >> 20) + " MiB",
            "messages");
      default:
        throw ApiError(500, "the chat renderer ended while rendering (killed, or out of memory)");
    }
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
    return j["prompt"].get<std::string>();
  }
  throw ApiError(400,
                 j.is_object() && j.contains("error") && j["error"].is_string()
                     ? j["error"].get<std::string>()
                     : "the chat renderer answered " + line.substr(0, 200),
                 "messages");
}

}  // namespace llm_server
