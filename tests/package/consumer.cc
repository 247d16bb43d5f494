#include <disco/disco.h>
#include <mpi.h>

#include <cstdio>

DISCO_REGISTER_GLOBAL("consumer.square").set_body_typed([](int64_t x) { return x * x; });
// A program may call MPI itself: the package brings the MPI's flags (disco.pc: its module).
DISCO_REGISTER_GLOBAL("consumer.world_size").set_body_typed([]() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return static_cast<int64_t>(size);
});

int main(int argc, char** argv) {
  return disco::Main(argc, argv, [](disco::Session& s) {
    disco::DRef r = s.CallPacked(s.GetGlobalFunc("consumer.square"), 12);
    int64_t last = r.DebugGetFromRemote(s.num_workers() - 1).cast<int64_t>();
    disco::DRef w = s.CallPacked(s.GetGlobalFunc("consumer.world_size"));
    if (w.DebugGetFromRemote(0).cast<int64_t>() != s.num_workers()) return 1;
    std::printf("consumer: %d workers, square on the last = %lld\n", s.num_workers(),
                static_cast<long long>(last));
    return last == 144 ? 0 : 1;
  });
}
