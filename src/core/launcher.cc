#include "core/launcher.h"

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

extern char** environ;

namespace disco {
namespace {
std::atomic<void (*)(const std::string&)> g_fatal_handler{nullptr};
}  // namespace

void SetFatalHandler(void (*handler)(const std::string& cause)) { g_fatal_handler = handler; }

void EndJobWithError(const std::string& cause) {
  if (void (*handler)(const std::string&) = g_fatal_handler.load()) handler(cause);
  std::fprintf(stderr, "fatal: %s -- ending the process\n", cause.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void EndSlurmStep() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (job == nullptr || step == nullptr || *job == '\0' || *step == '\0') return;
  char target[96];
  std::snprintf(target, sizeof target, "%s.%s", job, step);
  char scancel[] = "scancel", quiet[] = "--quiet";
  char* argv[] = {scancel, quiet, target, nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "scancel", nullptr, nullptr, argv, environ) != 0) return;
  // A moment for scancel to reach slurmctld before this rank's exit takes the step down on its
  // own node.
  for (int i = 0; i < 20; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(50 * 1000);
  }
}

namespace {

// The parent of `pid` from /proc/PID/stat (the field after the command, which may hold spaces and
// parentheses), or -1.
pid_t ParentOf(pid_t pid) {
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  int ppid = -1;
  char state = 0;
  if (close == nullptr || std::sscanf(close + 1, " %c %d", &state, &ppid) != 2) return -1;
  return static_cast<pid_t>(ppid);
}

}  // namespace

namespace {

// The command name of `pid` (/proc/PID/comm, at most 15 characters), or "".
std::string CommandOf(pid_t pid) {
  char path[64], comm[32] = {0};
  std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "";
  size_t n = std::fread(comm, 1, sizeof comm - 1, f);
  std::fclose(f);
  while (n > 0 && (comm[n - 1] == '\n' || comm[n - 1] == ' ')) comm[--n] = '\0';
  return comm;
}

// A process that starts ranks and waits for them: Open MPI's mpirun and its node daemons (orted;
// prterun and prted from Open MPI 5), MPICH's hydra (mpiexec.hydra, under whatever name it was
// started: mpirun, mpiexec, Debian's mpirun.mpich).
bool IsLauncher(const std::string& comm) {
  for (const char* name :
       {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted", "mpiexec.hydra",
        "mpirun.mpich", "mpiexec.mpich", "mpirun.openmpi", "mpiexec.openmpi"}) {
    if (comm == name) return true;
  }
  return false;
}

// The launcher processes of this node: the parent when it is one (mpirun on the node that
// started the job, orted on the others), or hydra's proxy, the parent of MPICH's ranks on every
// node, and on the node that started the job the proxy's own parent, mpiexec.
struct LocalLauncherProcs {
  pid_t parent = -1;
  pid_t top = -1;  // hydra: the mpiexec above the proxy, where it runs on this node
  std::string parent_name, top_name;
};
LocalLauncherProcs FindLocalLauncher() {
  LocalLauncherProcs l;
  const pid_t parent = getppid();
  const std::string name = CommandOf(parent);
  if (name == "hydra_pmi_proxy") {
    const pid_t top = ParentOf(parent);
    const std::string top_name = top > 1 ? CommandOf(top) : "";
    if (IsLauncher(top_name)) {
      l.top = top;
      l.top_name = top_name;
    }
  } else if (!IsLauncher(name)) {
    return l;
  }
  l.parent = parent;
  l.parent_name = name;
  return l;
}

}  // namespace

std::string LocalLauncher() {
  const LocalLauncherProcs l = FindLocalLauncher();
  if (l.parent < 0) return "";
  std::string out = l.parent_name + " (pid " + std::to_string(l.parent) + ")";
  if (l.top > 0) out += " and " + l.top_name + " (pid " + std::to_string(l.top) + ")";
  return out;
}

void EndLocalLauncher() {
  const LocalLauncherProcs l = FindLocalLauncher();
  if (l.parent < 0) return;
  // Its other children (this node's other ranks) first: they would wait for peers that are gone
  // until their own watchdogs noticed.
  const pid_t self = getpid();
  if (DIR* proc = opendir("/proc")) {
    while (dirent* e = readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0' || pid == self) continue;
      if (ParentOf(static_cast<pid_t>(pid)) == l.parent) kill(static_cast<pid_t>(pid), SIGKILL);
    }
    closedir(proc);
  }
  kill(l.parent, SIGKILL);
  // Hydra's mpiexec waits for every node's proxy, also one on a node that is gone.
  if (l.top > 0) kill(l.top, SIGKILL);
}

}  // namespace disco
