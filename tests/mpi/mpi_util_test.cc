// The MPI helpers that depend on which MPI runs them: its family, and its settings read through
// the MPI tool interface on every worker, more than once (MPICH 4.0 crashed on the second
// MPI_T_init_thread after an MPI_T_finalize), without changing the thread level MPI reports.
#include <disco/disco.h>
#include <gtest/gtest.h>

#include <string>

#include "mpi/mpi_test_env.h"
#include "mpi/mpi_util.h"

namespace disco {
namespace {

using testing::g_session;

// The family's transport settings, each read twice, with a tool of the program's own (mpi4py,
// a profiler) starting and finalizing the tool interface between the rounds: "family a=b c=d"
// once the two rounds agree.
DISCO_REGISTER_GLOBAL("test.tool_settings").set_body_typed([]() {
  const mpi::Family family = mpi::LibraryFamily();
  std::vector<std::string> names;
  if (family == mpi::Family::kOpenMpi) names = {"pml", "btl"};
  if (family == mpi::Family::kMpich) names = {"MPIR_CVAR_CH4_NETMOD", "MPIR_CVAR_CH4_SHM"};
  std::string first, second;
  int level = -1, level_after = -1;
  DISCO_MPI_CALL(MPI_Query_thread(&level));
  for (const std::string& name : names) first += " " + name + "=" + mpi::ToolStringSetting(name);
  // Open MPI 4.1's MPI_T_init_thread sets the level MPI_Query_thread reports: the tool interface
  // is started at the level MPI runs at, not below it.
  DISCO_MPI_CALL(MPI_Query_thread(&level_after));
  DISCO_CHECK(level_after == level, RuntimeError)
      << "MPI_Query_thread said " << level << " before reading the settings, " << level_after
      << " after";
  int provided = 0;
  DISCO_CHECK(MPI_T_init_thread(level, &provided) == MPI_SUCCESS, RuntimeError)
      << "MPI_T_init_thread failed";
  MPI_T_finalize();
  for (const std::string& name : names) second += " " + name + "=" + mpi::ToolStringSetting(name);
  DISCO_CHECK(first == second, RuntimeError) << "read '" << first << "', then '" << second << "'";
  return std::string(mpi::FamilyName(family)) + first + " thread=" + std::to_string(level);
});

TEST(MpiUtilTest, ToolSettingsReadAgainOnEveryWorker) {
  Session& s = *g_session;
  DRef f = s.GetGlobalFunc("test.tool_settings");
  int level = -1;
  DISCO_MPI_CALL(MPI_Query_thread(&level));
  for (int round = 0; round < 2; ++round) {
    DRef r = s.CallPacked(f);
    for (int w = 0; w < s.num_workers(); ++w) {
      std::string got = r.DebugGetFromRemote(w).cast<std::string>();
      EXPECT_EQ(got.substr(0, got.find(' ')), mpi::FamilyName(mpi::LibraryFamily()))
          << "worker " << w << ": " << got;
      EXPECT_NE(got.find(" thread=" + std::to_string(level)), std::string::npos)
          << "worker " << w << " runs at another thread level than rank 0: " << got;
    }
  }
}

TEST(MpiUtilTest, FamilyMatchesTheLibraryVersion) {
  const std::string version = mpi::LibraryVersion();
  switch (mpi::LibraryFamily()) {
    case mpi::Family::kOpenMpi:
      EXPECT_NE(version.find("Open MPI"), std::string::npos) << version;
      break;
    case mpi::Family::kMpich:
      EXPECT_EQ(version.find("Open MPI"), std::string::npos) << version;
      break;
    case mpi::Family::kOther:
      EXPECT_EQ(version.find("Open MPI"), std::string::npos) << version;
      EXPECT_EQ(version.find("MPICH"), std::string::npos) << version;
      break;
  }
}

}  // namespace
}  // namespace disco
