// Progress lines of long loads and saves: worker 0 (rank 0's process) prints, to stderr, how far a
// load_tensors or save_tensors has come once it has run DISCO_PROGRESS_MS (default 3000; 0 turns
// them off), then at most every 2 s, and a closing line with the bytes and the rate when it ends.
// Datasets are the steps: a single dataset's read is not split.
#pragma once

#include <cstdint>
#include <string>

namespace disco {
namespace io {
namespace progress {

/// A dataset of `path` begins: "loading" or "saving". A different path or verb starts a new run.
void Begin(const char* verb, const std::string& path);
/// The dataset that began has moved `bytes` (this worker's shard).
void Done(int64_t bytes);
/// The run on `path` is over: its closing line, naming `shown` (default: `path`; a save's partial
/// file is shown under the name it gets), if it printed any or took long; then forgotten.
void End(const std::string& path, const std::string& shown = "");

}  // namespace progress
}  // namespace io
}  // namespace disco
