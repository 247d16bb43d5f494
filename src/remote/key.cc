#include "remote/key.h"

#include <disco/error.h>
#include <disco/files.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/crypto.h"

namespace disco {
namespace remote {

std::string GenerateKey() {
  unsigned char bytes[32];
  crypto::RandomBytes(bytes, sizeof bytes);
  static const char kHex[] = "0123456789abcdef";
  std::string key;
  for (unsigned char b : bytes) {
    key += kHex[b >> 4];
    key += kHex[b & 15];
  }
  return key;
}

namespace {
std::string HomeDirectory() {
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return home;
  passwd* pw = getpwuid(getuid());
  DISCO_CHECK(pw != nullptr && pw->pw_dir != nullptr, ValueError)
      << "no home directory (HOME is unset and the password database has none) for the key file";
  return pw->pw_dir;
}
}  // namespace

std::string DefaultKeyFile(int port) {
  return HomeDirectory() + "/.disco/serve-" + std::to_string(port) + ".key";
}

std::string KeyFileContent(const std::string& key) { return key + "\n"; }

void WriteKeyFile(const std::string& path, const std::string& key) {
  // The directory to make when missing: none for a bare file name (the current directory), "/" for
  // a file at the root.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string()
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (!dir.empty() && access(dir.c_str(), F_OK) != 0) {
    DISCO_CHECK(mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST, RuntimeError)
        << "cannot make the key directory '" << dir << "': " << std::strerror(errno);
  }
  try {
    AtomicFile file(path);  // 0600 exactly, whatever the umask
    file.Write(KeyFileContent(key));
    file.Commit();
  } catch (const RuntimeError& e) {
    DISCO_THROW(RuntimeError) << "cannot write the key file '" << path << "': " << e.what();
  }
}

std::string ReadKeyFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  DISCO_CHECK(fd >= 0, ValueError)
      << "cannot read the key file '" << path << "': " << std::strerror(errno);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  DISCO_CHECK(fstat(fd, &st) == 0 && S_ISREG(st.st_mode), ValueError)
      << "the key file '" << path << "' is not a regular file";
  DISCO_CHECK(st.st_uid == geteuid() && (st.st_mode & 077) == 0, ValueError)
      << "the key file '" << path << "' must belong to you and be readable by you only (chmod 600 "
      << "it; its mode is " << std::oct << (st.st_mode & 0777) << std::dec << ")";
  char buf[2048];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  DISCO_CHECK(n >= 0, ValueError) << "cannot read the key file '" << path
                                  << "': " << std::strerror(errno);
  std::string key(buf, static_cast<size_t>(n));
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) {
    key.pop_back();
  }
  DISCO_CHECK(!key.empty(), ValueError) << "the key file '" << path << "' is empty";
  return key;
}

std::string ClientKey(const std::string& key, const std::string& key_file, int port,
                      std::string* source) {
  std::string ignored;
  if (source == nullptr) source = &ignored;
  if (!key.empty()) {
    *source = "the key given";
    return key;
  }
  const char* env = std::getenv("DISCO_SERVE_KEY");
  if (env != nullptr && *env != '\0') {
    *source = "DISCO_SERVE_KEY";
    return env;
  }
  std::string file = key_file;
  if (file.empty()) {
    const char* env_file = std::getenv("DISCO_SERVE_KEY_FILE");
    file = env_file != nullptr && *env_file != '\0' ? env_file : DefaultKeyFile(port);
  }
  DISCO_CHECK(access(file.c_str(), F_OK) == 0, ValueError)
      << "no key for the server on port " << port << ": none given, DISCO_SERVE_KEY is unset, and "
      << "there is no key file '" << file << "' (a server started without a key writes one "
      << "there; or set DISCO_SERVE_KEY_FILE)";
  *source = "the key file '" + file + "'";
  return ReadKeyFile(file);
}

}  // namespace remote
}  // namespace disco
