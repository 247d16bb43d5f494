// disco-bench: benchmarks that measure the runtime next to the raw MPI baseline in the same run.
//   mpirun -n 2 disco-bench call [--iters N] [--repeats R] [--csv FILE]
//   mpirun -n 2 disco-bench graph [--iters N] [--repeats R] [--bytes B]
#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "mpi/mpi_util.h"
#include "tools/bench_common.h"

namespace disco {
namespace bench {

Options Options::Parse(int argc, char** argv, int first) {
  Options o;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    DISCO_CHECK(a.rfind("--", 0) == 0, ValueError)
        << "disco-bench: unexpected argument '" << a << "'";
    a = a.substr(2);
    if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      o.values[a] = argv[++i];
    } else {
      o.values[a] = "1";
    }
  }
  return o;
}

int64_t Options::GetInt(const std::string& k, int64_t def) const {
  auto it = values.find(k);
  if (it == values.end()) return def;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);  // NOLINT(runtime/int)
  DISCO_CHECK(end != it->second.c_str() && *end == '\0' && v > 0, ValueError)
      << "disco-bench: --" << k << " needs a positive integer, got '" << it->second << "'";
  return v;
}

void Emit(const Table& table, const Options& opts, const std::vector<std::string>& meta) {
  table.Print(stdout);
  if (opts.Has("csv")) table.WriteCsv(opts.Get("csv", ""), meta);
  if (opts.Has("json")) table.WriteJson(opts.Get("json", ""), meta);
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
  metadata.push_back("disco=" DISCO_VERSION);
  metadata.push_back(std::string("date=") + date);
  return metadata;
}

}  // namespace bench
}  // namespace disco

int main(int argc, char** argv) {
  std::string sub = argc > 1 ? argv[1] : "";
  // The remote benchmark is a client outside any MPI job: it starts (or attaches to) the served
  // job itself.
  if (sub == "remote") {
    try {
      return disco::bench::RunRemoteBench(disco::bench::Options::Parse(argc, argv, 2));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "disco-bench remote: %s\n", e.what());
      return 1;
    }
  }
  return disco::Main(argc, argv, [&](disco::Session& s) -> int {
    disco::bench::Options opts = disco::bench::Options::Parse(argc, argv, 2);
    if (sub == "call") return disco::bench::RunCallBench(s, opts);
    if (sub == "ccl") return disco::bench::RunCclBench(s, opts);
    if (sub == "graph") return disco::bench::RunGraphBench(s, opts);
    if (sub == "load") return disco::bench::RunLoadBench(s, opts);
#if DISCO_BENCH_MLP
    if (sub == "mlp") return disco::bench::RunMlpBench(s, opts);
#endif
    std::fprintf(stderr,
                 "usage: mpirun -n 2 disco-bench call [--iters N] [--repeats R] [--max-bytes B] "
                 "[--csv FILE]\n"
                 "       mpirun -n 2 disco-bench ccl [--ccl mpi|nccl] [--op allreduce|allgather|"
                 "reduce_scatter|broadcast] [--min-bytes B] [--max-bytes B] [--repeats R] "
                 "[--csv FILE] [--json FILE]\n"
                 "       mpirun -n 2 disco-bench graph [--iters N] [--repeats R] [--bytes B] "
                 "[--csv FILE] [--json FILE]\n"
                 "       mpirun -n 2 disco-bench load [--bytes B] [--axis 1|2 (rows|columns)] "
                 "[--repeats R] [--dir DIR] [--csv FILE] [--json FILE]\n"
                 "       mpirun -n N disco-bench mlp [--hidden H] [--ffn F] [--layers L] "
                 "[--tokens T] [--steps S] [--dtype float32|bfloat16] [--csv FILE] [--json FILE]"
                 "\n"
                 "       disco-bench remote [--launch \"mpirun -n 2\" | --server HOST:PORT] "
                 "[--iters N] [--min-bytes B] [--max-bytes B] [--repeats R] [--csv FILE] "
                 "[--json FILE]   (not under mpirun: it starts the served job)\n"
                 "unknown or missing benchmark '%s'\n",
                 sub.c_str());
    return 2;
  });
}
