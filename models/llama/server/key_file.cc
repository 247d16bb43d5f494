#include "llama/server/key_file.h"

#include <disco/error.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace llm_server {
namespace {

constexpr size_t kMaxKeyBytes = 4096;

// Closes the descriptor on every path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string ReadKeyFile(const std::string& path) {
  const std::string what = "--api-key-file " + path;
  Fd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  DISCO_CHECK(fd.get() >= 0, ValueError)
      << what << ": cannot open it (" << std::strerror(errno) << "; a symbolic link is refused)";
  struct stat st {};
  DISCO_CHECK(fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), ValueError)
      << what << ": not a regular file";
  DISCO_CHECK(st.st_uid == geteuid(), ValueError)
      << what << ": owned by uid " << st.st_uid << ", not by this user (uid " << geteuid() << ")";
  DISCO_CHECK((st.st_mode & 077) == 0, ValueError)
      << what << ": group or others have access (mode " << std::oct << (st.st_mode & 0777)
      << std::dec << "); chmod 600 it";
  std::string key(kMaxKeyBytes + 1, '\0');
  size_t got = 0;
  for (ssize_t n; got < key.size(); got += static_cast<size_t>(n)) {
    n = read(fd.get(), &key[got], key.size() - got);
    if (n < 0 && errno == EINTR) {
      n = 0;
      continue;
    }
    DISCO_CHECK(n >= 0, ValueError) << what << ": cannot read it (" << std::strerror(errno) << ")";
    if (n == 0) break;
  }
  DISCO_CHECK(got <= kMaxKeyBytes, ValueError)
      << what << ": over " << kMaxKeyBytes << " bytes: a key is one line";
  key.resize(got);
  // Blanks around the key are the editor's, not the key's (a client cannot send a leading one in
  // its header either).
  const size_t begin = key.find_first_not_of(" \t\r\n");
  key = begin == std::string::npos ? ""
                                   : key.substr(begin, key.find_last_not_of(" \t\r\n") + 1 - begin);
  DISCO_CHECK(!key.empty() && key.find_first_of("\r\n") == std::string::npos, ValueError)
      << what << ": the key must be one non-empty line";
  // A byte a client cannot put in an Authorization header (a control byte, NUL) would make a
  // server that refuses every request.
  for (unsigned char c : key) {
    DISCO_CHECK(c >= 0x20 && c != 0x7f, ValueError)
        << what << ": the key holds a control byte (0x" << std::hex << static_cast<int>(c)
        << std::dec << "), which no client can send; use printable characters";
  }
  return key;
}

}  // namespace llm_server
