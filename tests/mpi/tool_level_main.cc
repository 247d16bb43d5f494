// mpi::ToolStringSetting in a program that runs MPI itself at MPI_THREAD_FUNNELED, which starts
// the tool interface on its first call (once per process):
//   level:          first called while MPI runs: the thread level MPI reports is the same after
//                   (Open MPI's MPI_T_init_thread sets it), and a setting reads the same after
//                   MPI_Finalize;
//   after-finalize: first called after MPI_Finalize (Open MPI's MPI_Query_thread then aborts and
//                   its MPI_T_init_thread frees a block twice, under AddressSanitizer): "", and
//                   the process goes on.
// Exits non-zero, naming the fault, when one fails.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "mpi/mpi_util.h"

int main(int argc, char** argv) {
  const bool after_finalize = argc > 1 && std::strcmp(argv[1], "after-finalize") == 0;
  int provided = 0, before = -1, after = -1;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
  MPI_Query_thread(&before);
  const std::string name =
      disco::mpi::LibraryFamily() == disco::mpi::Family::kMpich ? "MPIR_CVAR_CH4_NETMOD" : "pml";
  std::string first;
  if (!after_finalize) first = disco::mpi::ToolStringSetting(name);
  MPI_Query_thread(&after);
  MPI_Finalize();
  const std::string again = disco::mpi::ToolStringSetting(name);
  if (after != before) {
    std::printf("FAIL: MPI_Query_thread said %d before reading '%s', %d after\n", before,
                name.c_str(), after);
    return 1;
  }
  if (after_finalize && !again.empty()) {
    std::printf("FAIL: '%s' read '%s' after MPI_Finalize, with no tool interface started\n",
                name.c_str(), again.c_str());
    return 1;
  }
  if (!after_finalize && again != first) {
    std::printf("FAIL: '%s' read '%s' before MPI_Finalize, '%s' after\n", name.c_str(),
                first.c_str(), again.c_str());
    return 1;
  }
  std::printf("ok: thread level %d kept, %s='%s' read after MPI_Finalize\n", before, name.c_str(),
              again.c_str());
  return 0;
}
