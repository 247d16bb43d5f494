// disco-demo: greedy generation with a tensor-parallel Llama-style decoder from a Hugging Face
// checkpoint (models/llama: libdisco_llama, written against disco's public API only), or, with
// --mlp, the tensor-parallel MLP demo, which lives in a module of its own (disco-demo-mlp.so,
// src/tools/disco_demo.cc) loaded only then: its CUDA path links cuBLAS, whose resident data
// (about 140 MiB per process) the decoder's ranks should not carry.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama/driver.h"

#ifndef DISCO_DEMO_MLP_FROM_BINDIR
#define DISCO_DEMO_MLP_FROM_BINDIR "../lib"
#endif

namespace {

// The directory of this executable.
std::string ExeDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// Loads disco-demo-mlp.so (DISCO_DEMO_MLP_MODULE, else next to this program as built, else in the
// installed library directory) and runs its main.
int RunMlp(int argc, char** argv) {
  const std::string dir = ExeDir();
  std::vector<std::string> paths;
  if (const char* env = std::getenv("DISCO_DEMO_MLP_MODULE"); env != nullptr && env[0] != '\0') {
    paths.push_back(env);
  } else {
    paths = {dir + "/disco-demo-mlp.so", dir + "/" DISCO_DEMO_MLP_FROM_BINDIR "/disco-demo-mlp.so",
             dir + "/../lib/disco-demo-mlp.so"};
  }
  std::string errors;
  for (const std::string& p : paths) {
    if (access(p.c_str(), F_OK) != 0) {
      errors += "\n  " + p + ": no such file";
      continue;
    }
    void* handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      errors += "\n  " + p + ": " + dlerror();
      continue;
    }
    auto* main_fn = reinterpret_cast<int (*)(int, char**)>(dlsym(handle, "disco_demo_mlp_main"));
    if (main_fn == nullptr) {
      errors += "\n  " + p + ": no disco_demo_mlp_main";
      continue;
    }
    return main_fn(argc, argv);
  }
  std::fprintf(stderr, "disco-demo: --mlp needs the MLP demo's module, disco-demo-mlp.so:%s\n",
               errors.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  auto mlp = std::find_if(args.begin() + 1, args.end(),
                          [](const char* a) { return std::strcmp(a, "--mlp") == 0; });
  if (mlp == args.end()) return llama::DemoMain(argc, argv);
  args.erase(mlp);
  args.push_back(nullptr);
  return RunMlp(argc - 1, args.data());
}
