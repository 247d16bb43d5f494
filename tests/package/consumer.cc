#include <disco/disco.h>

#include <cstdio>

DISCO_REGISTER_GLOBAL("consumer.square").set_body_typed([](int64_t x) { return x * x; });

int main(int argc, char** argv) {
  return disco::Main(argc, argv, [](disco::Session& s) {
    disco::DRef r = s.CallPacked(s.GetGlobalFunc("consumer.square"), 12);
    int64_t last = r.DebugGetFromRemote(s.num_workers() - 1).cast<int64_t>();
    std::printf("consumer: %d workers, square on the last = %lld\n", s.num_workers(),
                static_cast<long long>(last));
    return last == 144 ? 0 : 1;
  });
}
