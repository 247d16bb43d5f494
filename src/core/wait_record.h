// What this rank waits for or works on inside a command, for the watchdog (src/session/
// watchdog.h), which names it when a command overruns and tells it rank 0 when rank 0 gathers
// every rank's state for the hang verdict: the data plane (src/ccl) records the collective it is
// in and the peer it waits for, the I/O layer (src/io) the HDF5 read or write it is doing. Kept
// here, below all of them. Written by the thread running commands, read by the watchdog's; a
// reader may see a text half-rewritten (a diagnostic tolerates that; every text keeps its NUL).
#ifndef DISCO_CORE_WAIT_RECORD_H_
#define DISCO_CORE_WAIT_RECORD_H_

#include <cstddef>
#include <string>

namespace disco {
namespace wait_record {

constexpr size_t kActivityBytes = 80;

/// This rank now waits for `peer` (a world rank; -1: none or unknown).
void WaitingFor(int peer);
/// The peer recorded last, or -1.
int Peer();
/// This rank is inside the collective builtin `op` (a string that outlives the command, e.g.
/// "disco.allreduce"); nullptr: none.
void InCollective(const char* op);
/// The collective recorded last, or nullptr.
const char* Collective();
/// No wait, collective or activity (a command begins or ends).
void Clear();

/// Copies what this rank does now into `out` (`cap` bytes, NUL-terminated; "" when nothing).
void Activity(char* out, size_t cap);

/// Records `text` ("HDF5 read of 'model.h5' dataset 'w'", cut to kActivityBytes - 1) as this
/// rank's activity for as long as the scope lives; a `literal` (a text that outlives the scope)
/// by its address alone, which costs one store (SyncAll's).
class Doing {
 public:
  explicit Doing(const std::string& text);
  explicit Doing(const char* literal);
  ~Doing();
  Doing(const Doing&) = delete;
  Doing& operator=(const Doing&) = delete;

 private:
  bool literal_ = false;
};

}  // namespace wait_record
}  // namespace disco

#endif  // DISCO_CORE_WAIT_RECORD_H_
