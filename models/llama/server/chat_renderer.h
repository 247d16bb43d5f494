// A checkpoint's chat template, rendered for disco-llm-server by Jinja2 itself: the template is a
// Jinja2 program (loops, namespaces, Python string methods) that no C++ engine packaged for
// Debian runs faithfully, so rank 0 keeps a child `python3 -I -B chat.py --serve DIR` (disco's
// sandboxed renderer, python/disco/chat.py, on Debian's python3-jinja2) and asks it over pipes,
// one JSON line each way (a socket pair, so that a child that died is an error and not a
// SIGPIPE). A render that takes over `kRenderSeconds` kills the child (a template
// that loops); the next request starts a new one. Without Python, Jinja2 or chat.py the server
// still serves completions and says why chat is unavailable.
#ifndef DISCO_MODELS_LLAMA_SERVER_CHAT_RENDERER_H_
#define DISCO_MODELS_LLAMA_SERVER_CHAT_RENDERER_H_

#include <sys/types.h>

#include <functional>
#include <mutex>
#include <string>

namespace llm_server {

class ChatRenderer {
 public:
  static constexpr int kRenderSeconds = 10;
  static constexpr size_t kMaxReplyBytes = size_t{64} << 20;

  /// Starts the renderer for `model_dir` and waits for its first line (not once `give_up` says
  /// so: the server is stopping).
  explicit ChatRenderer(std::string model_dir, std::function<bool()> give_up = {});
  ~ChatRenderer();
  ChatRenderer(const ChatRenderer&) = delete;
  ChatRenderer& operator=(const ChatRenderer&) = delete;

  /// One line for the startup output: the template's file, or why chat is not served.
  const std::string& status() const { return status_; }
  /// Empty when chat is served; else the error to answer with (`unavailable_code()`: 400 when the
  /// checkpoint has no template, 501 when the renderer cannot run).
  const std::string& unavailable() const { return unavailable_; }
  int unavailable_code() const { return unavailable_code_; }

  /// The prompt text for `messages` (a JSON array, one line). Throws ApiError: 400 with the
  /// template's own error, 500 when the renderer failed or took too long.
  std::string Render(const std::string& messages);

 private:
  bool Start();
  void Kill();
  enum class Read { kLine, kTimeout, kEnded, kTooLong };
  // The next line from the child within `seconds`.
  Read ReadLine(int seconds, std::string* line);

  const std::string model_dir_;
  std::function<bool()> give_up_;
  std::string script_, status_, unavailable_, template_file_;
  int unavailable_code_ = 0;
  std::mutex mu_;  // one render at a time; guards what follows
  std::string start_error_;
  bool no_template_ = false;
  pid_t pid_ = -1;
  int fd_ = -1;          // a socket to the child's stdin and stdout
  std::string pending_;  // bytes read past the last line
};

/// Where chat.py is: beside this program's install (<prefix>/bin/../<python dir>/disco), else
/// the build tree's; "" when neither is there.
std::string FindChatScript();

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_CHAT_RENDERER_H_
