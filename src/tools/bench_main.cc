// disco-bench: benchmarks that measure the runtime next to the raw MPI baseline in the same run
// (the command line: bench_cli.cc); here the pieces they share: tables, CSV/JSON, metadata.
#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "mpi/mpi_util.h"
#include "tools/bench_common.h"

namespace disco {
namespace bench {

void Emit(const Table& table, const Output& out, const std::vector<std::string>& meta) {
  table.Print(stdout);
  if (!out.csv.empty()) table.WriteCsv(out.csv, meta);
  if (!out.json.empty()) table.WriteJson(out.json, meta);
}

std::string Fmt(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

void Table::Print(FILE* out) const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      std::fprintf(out, "%s%*s", c ? "  " : "", static_cast<int>(width[c]), cells[c].c_str());
    }
    std::fprintf(out, "\n");
  };
  line(columns_);
  for (const auto& r : rows_) line(r);
  std::fflush(out);
}

void Table::WriteCsv(const std::string& path, const std::vector<std::string>& metadata) const {
  std::ofstream f(path);
  DISCO_CHECK(f.good(), ValueError) << "disco-bench: cannot write '" << path << "'";
  for (const auto& m : metadata) f << "# " << m << "\n";
  for (size_t c = 0; c < columns_.size(); ++c) f << (c ? "," : "") << columns_[c];
  f << "\n";
  for (const auto& r : rows_) {
    for (size_t c = 0; c < r.size(); ++c) f << (c ? "," : "") << r[c];
    f << "\n";
  }
}

// Nodes = ranks whose node-local rank is 0, counted by every rank together.
DISCO_REGISTER_GLOBAL("bench.num_nodes").set_body_typed([]() {
  int leader = ThisWorker().local_rank == 0 ? 1 : 0, nodes = 0;
  DISCO_MPI_CALL(MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  return static_cast<int64_t>(nodes);
});

// How the ranks reach each other: shared memory within a node, the network between nodes; then
// the MPI library's transport settings as key=value words ("default": the library's own choice),
// under the names its family uses (Open MPI's pml and btl, MPICH's ch4 netmod and shm).
DISCO_REGISTER_GLOBAL("bench.transport").set_body_typed([](int64_t nodes) {
  std::string out = nodes > 1 ? "network+shared-memory" : "shared-memory";
  std::vector<std::pair<std::string, std::string>> settings;  // field, control variable
  switch (mpi::LibraryFamily()) {
    case mpi::Family::kOpenMpi:
      settings = {{"mpi_pml", "pml"}, {"mpi_btl", "btl"}};
      break;
    case mpi::Family::kMpich:
      settings = {{"mpi_netmod", "MPIR_CVAR_CH4_NETMOD"}, {"mpi_shm", "MPIR_CVAR_CH4_SHM"}};
      break;
    case mpi::Family::kOther:
      break;
  }
  for (const auto& [field, cvar] : settings) {
    const std::string value = mpi::ToolStringSetting(cvar);
    out += " " + field + "=" + (value.empty() ? std::string("default") : value);
  }
  return out;
});

int64_t NumNodes(Session& s) {
  return s.CallPacked(s.GetGlobalFunc("bench.num_nodes")).DebugGetFromRemote(0).cast<int64_t>();
}

std::vector<std::string> Metadata(Session& s) {
  int64_t nodes = NumNodes(s);
  std::istringstream transport(s.CallPacked(s.GetGlobalFunc("bench.transport"), nodes)
                                   .DebugGetFromRemote(0)
                                   .cast<std::string>());
  std::string how, setting;
  transport >> how;
  std::vector<std::string> metadata = {"ranks=" + std::to_string(s.num_workers()),
                                       "nodes=" + std::to_string(nodes), "transport=" + how};
  while (transport >> setting) metadata.push_back(setting);
  char date[64];
  std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  metadata.push_back("mpi=" + mpi::LibraryVersion());
  int level = MPI_THREAD_SINGLE;
  DISCO_MPI_CALL(MPI_Query_thread(&level));
  // Open MPI locks in every send and wait above MPI_THREAD_SINGLE: raw figures depend on it.
  const char* names[] = {"single", "funneled", "serialized", "multiple"};
  const int index = level == MPI_THREAD_SINGLE       ? 0
                    : level == MPI_THREAD_FUNNELED   ? 1
                    : level == MPI_THREAD_SERIALIZED ? 2
                                                     : 3;
  metadata.push_back(std::string("mpi_thread=") + names[index]);
  metadata.push_back("disco=" DISCO_VERSION);
  metadata.push_back(std::string("date=") + date);
  return metadata;
}

}  // namespace bench
}  // namespace disco
