// Shared pieces of disco-bench: options, clocks, statistics and table/CSV output.
#ifndef DISCO_TOOLS_BENCH_COMMON_H_
#define DISCO_TOOLS_BENCH_COMMON_H_

#include <disco/disco.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "mlp/model.h"
#include "mpi/clock.h"

namespace disco {
namespace bench {

/// The runtime's clock (mpi/clock.h): the simulated time when disco runs under SMPI.
inline double NowUs() { return mpi::NowUs(); }

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
  return v[i];
}

/// Where a benchmark's table goes besides stdout (--csv FILE, --json FILE; empty: nowhere).
struct Output {
  std::string csv, json;
};

/// Each benchmark's options, parsed and range-checked by bench_cli.cc (which gives each a
/// description for --help); the initial values are the defaults.
struct CallOptions {
  int64_t iters = 20000, latency_iters = 2000, repeats = 5, max_bytes = 65536;
  std::string csv;
};
struct CclOptions {
  std::string ccl = "mpi", op;  // op: one collective, or all of them
  int64_t min_bytes = 4096, max_bytes = 64 << 20, repeats = 3;
  Output out;
};
struct GraphOptions {
  int64_t iters = 20000, repeats = 5, bytes = 4096;
  Output out;
};
struct LoadOptions {
  int64_t bytes = int64_t{256} << 20, axis = 1, repeats = 5;  // axis 1: rows, 2: columns
  std::string dir = "/tmp";
  Output out;
};
struct MlpOptions {
  MlpOptions() { model.steps = 5; }
  demo::Config model;  // hidden, ffn, layers, tokens, steps, dtype
  std::string dir = "/tmp";
  Output out;
};
struct RemoteOptions {
  std::string launch = "mpirun -n 2", server;  // server: HOST:PORT of a running job
  int64_t iters = 2000, min_bytes = 4096, max_bytes = 64 << 20, repeats = 5;
  Output out;
};

/// A result table printed aligned to stdout and optionally written as CSV.
class Table {
 public:
  explicit Table(std::vector<std::string> columns) : columns_(std::move(columns)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(FILE* out) const;
  void WriteCsv(const std::string& path, const std::vector<std::string>& metadata) const;
  /// {"metadata": {...}, "rows": [{column: value, ...}, ...]}; numbers stay numbers.
  void WriteJson(const std::string& path, const std::vector<std::string>& metadata) const;

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

std::string Fmt(double v, int precision = 3);
/// The number of nodes the job spans (a collective call on every worker).
int64_t NumNodes(Session& s);
/// Run metadata lines: ranks, nodes, MPI version, disco version, date.
std::vector<std::string> Metadata(Session& s);

/// Prints `table` and writes it where --csv and --json say, with `meta` as the run's metadata.
void Emit(const Table& table, const Output& out, const std::vector<std::string>& meta);

int RunCallBench(Session& s, const CallOptions& opts);
int RunCclBench(Session& s, const CclOptions& opts);
int RunGraphBench(Session& s, const GraphOptions& opts);
int RunLoadBench(Session& s, const LoadOptions& opts);
/// Only in builds with OpenBLAS (DISCO_BENCH_MLP).
int RunMlpBench(Session& s, const MlpOptions& opts);
/// The remote-session benchmark: a client process, no MPI job of its own.
int RunRemoteBench(const RemoteOptions& opts);

}  // namespace bench
}  // namespace disco

#endif  // DISCO_TOOLS_BENCH_COMMON_H_
