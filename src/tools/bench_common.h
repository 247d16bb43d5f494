// Shared pieces of disco-bench: options, clocks, statistics and table/CSV output.
#ifndef DISCO_TOOLS_BENCH_COMMON_H_
#define DISCO_TOOLS_BENCH_COMMON_H_

#include <disco/disco.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

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

/// "--name value" and "--flag" options after the subcommand.
struct Options {
  std::map<std::string, std::string> values;
  static Options Parse(int argc, char** argv, int first);
  bool Has(const std::string& k) const { return values.count(k) != 0; }
  std::string Get(const std::string& k, const std::string& def) const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
  }
  int64_t GetInt(const std::string& k, int64_t def) const;
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
void Emit(const Table& table, const Options& opts, const std::vector<std::string>& meta);

int RunCallBench(Session& s, const Options& opts);
int RunCclBench(Session& s, const Options& opts);
int RunGraphBench(Session& s, const Options& opts);
int RunLoadBench(Session& s, const Options& opts);
/// Only in builds with OpenBLAS (DISCO_BENCH_MLP).
int RunMlpBench(Session& s, const Options& opts);
/// The remote-session benchmark: a client process, no MPI job of its own.
int RunRemoteBench(const Options& opts);

}  // namespace bench
}  // namespace disco

#endif  // DISCO_TOOLS_BENCH_COMMON_H_
