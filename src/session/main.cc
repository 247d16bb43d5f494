// disco::Main: MPI start-up, the banner, the controller on rank 0 and the worker loop elsewhere,
// and the fatal-error path that ends every rank instead of leaving some of them hanging.
#include <disco/config.h>
#include <disco/log.h>
#include <disco/session.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/exit_cleanup.h"
#include "core/launcher.h"
#include "core/process_info.h"
#include "core/trace.h"
#include "mpi/mpi_util.h"
#include "session/builtins.h"
#include "session/flight_recorder.h"
#include "session/liveness.h"
#include "session/mpi_transport.h"
#include "session/session_impl.h"
#include "session/trace_job.h"
#include "session/watchdog.h"
#include "session/worker.h"

namespace disco {
namespace {

std::string StripPrefix(const std::string& what) {
  std::string prefix = detail::RankPrefix();
  if (what.compare(0, prefix.size(), prefix) == 0) return what.substr(prefix.size());
  return what;
}

[[noreturn]] void FatalAbort(const std::string& cause) {
  exit_cleanup::RemoveRegisteredFiles();  // a served job's key file: no destructor runs from here
  LogLine(LogLevel::kError, "fatal: " + StripPrefix(cause) + " -- aborting the job");
  watchdog::Dump("fatal error");
  EndSlurmStep();  // srun without --kill-on-bad-exit would leave the other nodes' ranks waiting
  // A moment for the launcher to forward these lines: MPICH's hydra, told of the abort, ends the
  // job and may take the rank's unread output with it (mpi.fault.garbled_frame lost its line).
  if (!DISCO_SIMULATED) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (mpi::IsActive()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void TerminateHandler() {
  std::string cause = "std::terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      cause = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      cause = "uncaught non-standard exception";
    }
  }
  FatalAbort(cause);
}

// A launcher that starts N processes while MPI gives each a world of one (a PMI mismatch: srun
// without the right --mpi, or a program run directly inside a step) would make N controllers that
// each think they are the whole job. Returns the explanation, or "" when all is well.
std::string LauncherMismatch(int world_size) {
  if (world_size != 1) return "";
  // The most specific statement wins: mpirun's own, then the Slurm step's, then the allocation's
  // (a program started alone inside an allocation), then a PMI-1 launcher's.
  for (const char* var :
       {"OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "PMI_SIZE"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    if (std::atoi(v) <= 1) return "";
    // The PMI this MPI's client speaks: Open MPI's is PMIx, MPICH's (hydra's) PMI-1/PMI-2.
    const char* pmi = mpi::LibraryFamily() == mpi::Family::kMpich ? "pmi2" : "pmix";
    std::ostringstream why;
    why << "this process sees an MPI world of 1 rank, but " << var << "=" << v
        << " says the job has " << v
        << ": the launcher and MPI disagree on how processes find each other (PMI). Under Slurm "
        << "use `srun --mpi=" << pmi << "` for this MPI (see `srun --mpi=list`), or `mpirun` "
        << "inside the allocation; `launch/disco-run` picks the right one";
    return why.str();
  }
  return "";
}

// The settings every rank must share (they choose collective paths: ranks that disagree would
// enter different collectives). A launcher need not pass the environment to every node (mpirun
// without -x), so rank 0's values are made every rank's, in its environment, before anything
// reads them; a rank whose own value differed says so (warn level). DISCO_NUM_GROUPS,
// DISCO_TIMEOUT, DISCO_INLINE_BYTES, DISCO_MAX_FRAME_BYTES and DISCO_PREPOST_FRAMES travel in the
// SessionConfig.
constexpr const char* kJobKnobs[] = {"DISCO_CCL",           "DISCO_CCL_SHM",
                                     "DISCO_CCL_SYNC_SEND", "DISCO_H5_INDEPENDENT",
                                     "DISCO_TRACE",         "DISCO_TRACE_EVENTS"};

void AgreeOnJobKnobs(int rank) {
  for (const char* name : kJobKnobs) {
    const char* mine = std::getenv(name);
    // [length + 1, or 0 when unset], then the value whole: a value is never cut, so every rank
    // reads what rank 0 reads (a cut "000...01" would be 0 on some ranks and 1 on rank 0).
    int64_t length = rank == 0 && mine != nullptr ? static_cast<int64_t>(std::strlen(mine)) + 1 : 0;
    DISCO_MPI_CALL(MPI_Bcast(&length, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
    DISCO_CHECK(length >= 0 && length <= (int64_t{1} << 20), ValueError)
        << name << " is " << length - 1 << " characters long (at most 1 MiB)";
    std::string value(length > 0 ? static_cast<size_t>(length - 1) : 0, '\0');
    if (rank == 0 && mine != nullptr) value = mine;
    if (!value.empty()) {
      DISCO_MPI_CALL(
          MPI_Bcast(value.data(), static_cast<int>(value.size()), MPI_CHAR, 0, MPI_COMM_WORLD));
    }
    if (rank == 0) continue;
    const bool set = length > 0;
    if (set == (mine != nullptr) && (!set || value == mine)) continue;
    DISCO_LOG(WARN) << name << (mine != nullptr ? std::string("=") + mine : std::string(" unset"))
                    << " on this rank, " << (set ? "=" + value : std::string(" unset"))
                    << " on rank 0: rank 0's is used (a setting of the whole job; mpirun passes "
                       "variables to other nodes with -x)";
    if (set) {
      setenv(name, value.c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
}

// Rank 0's settings, so that every rank agrees on the frame size.
SessionConfig AgreeOnConfig(const SessionConfig& mine) {
  int64_t values[5] = {mine.inline_bytes, mine.max_frame_bytes, mine.num_groups, mine.timeout_s,
                       mine.prepost_frames};
  DISCO_MPI_CALL(MPI_Bcast(values, 5, MPI_INT64_T, 0, MPI_COMM_WORLD));
  SessionConfig c;
  c.inline_bytes = values[0];
  c.max_frame_bytes = values[1];
  c.num_groups = values[2];
  c.timeout_s = values[3];
  c.prepost_frames = values[4];
  return c;
}

// The session's configuration as rank 0 reads it from the environment (other ranks: a default,
// which AgreeOnConfig replaces); nothing on every rank when rank 0 refused a knob (it said why).
std::optional<SessionConfig> ConfigFromEnv(int rank, int size) {
  SessionConfig config;
  int64_t config_ok = 1;
  if (rank == 0) {
    try {
      config = SessionConfig::FromEnv(size);
    } catch (const std::exception& e) {
      LogLine(LogLevel::kError, StripPrefix(e.what()));
      config_ok = 0;
    }
  }
  DISCO_MPI_CALL(MPI_Bcast(&config_ok, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  if (!config_ok) return std::nullopt;
  return config;
}

// Starts the watchdog on every rank. The job's liveness secret: drawn by rank 0, carried by MPI
// only (never by the network otherwise); the hosts of every rank choose the address the liveness
// socket is bound to, and every rank learns every other's.
void StartWatchdog(int rank, int size, double timeout_s) {
  liveness::JobSecret secret;
  if (rank == 0) secret = liveness::NewJobSecret();
  DISCO_MPI_CALL(MPI_Bcast(&secret, sizeof secret, MPI_BYTE, 0, MPI_COMM_WORLD));
  std::vector<watchdog::PingAddress> hosts(static_cast<size_t>(size));
  watchdog::PingAddress here = watchdog::LocalHost();
  DISCO_MPI_CALL(MPI_Allgather(&here, sizeof here, MPI_BYTE, hosts.data(), sizeof here, MPI_BYTE,
                               MPI_COMM_WORLD));
  watchdog::Start(rank, size, timeout_s, secret, hosts);
  std::memset(secret.secret, 0, sizeof secret.secret);
  std::vector<watchdog::PingAddress> all(static_cast<size_t>(size));
  watchdog::PingAddress mine = watchdog::LocalPingAddress();
  DISCO_MPI_CALL(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE,
                               MPI_COMM_WORLD));
  watchdog::SetPingAddresses(all);
}

// Rank 0: the controller program on a session, then the session's shutdown. The job's exit code.
int RunController(MpiTransport* transport, const SessionConfig& config, const WorkerInfo& info,
                  const std::function<int(Session&)>& controller) {
  detail::SetThisWorker(info);
  auto impl = std::make_shared<detail::SessionImpl>(transport, config, info);
  Session session(impl);
  int user_code = 0;
  watchdog::ControllerRunning(true);
  try {
    user_code = controller(session);
  } catch (const std::exception& e) {
    FatalAbort(std::string("controller raised ") + e.what());
  } catch (...) {
    FatalAbort("controller raised a non-standard exception");
  }
  watchdog::ControllerRunning(false);
  int exit_code = impl->Shutdown(user_code);
  // A controller that shut the session down itself fixed the workers' code then (0); its own
  // failure still ends rank 0, and so the job, non-zero.
  if (exit_code == 0) exit_code = user_code;
  return exit_code;
}

}  // namespace

int Main(int argc, char** argv, std::function<int(Session&)> controller) {
  int initialized = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {  // MPI cannot start again; any MPI call now would abort the process
    LogLine(LogLevel::kError,
            "fatal: disco::Main called after MPI_Finalize: MPI cannot start again in this process "
            "(run every disco::Main before MPI is finalized)");
    return 1;
  }
  MPI_Initialized(&initialized);
  const bool owns_mpi = !initialized;
  if (owns_mpi) {
    // MPI_THREAD_SINGLE: only this thread calls MPI (the watchdog and the liveness channel never
    // do), and Open MPI 4.1 takes a mutex in every send and wait at any level above SINGLE: a
    // 256-byte MPI_Bcast between two ranks costs 0.158 us under FUNNELED and 0.075 under SINGLE
    // (disco-bench call's raw column). MPICH locks only under MULTIPLE. A program that needs
    // another level initializes MPI itself before Main.
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
      LogLine(LogLevel::kError, "fatal: MPI_Init_thread failed");
      return 1;
    }
  }
  std::set_terminate(TerminateHandler);
  SetFatalHandler(&FatalAbort);
  int exit_code = 1;
  try {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    DISCO_MPI_CALL(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    DISCO_MPI_CALL(MPI_Comm_size(MPI_COMM_WORLD, &size));
    const mpi::NodeLocal local = mpi::NodeLocalRank(MPI_COMM_WORLD);
    const int local_rank = local.rank;
    SetProcessInfo(rank, size, local_rank);
    if (std::string why = LauncherMismatch(size); !why.empty()) {
      LogLine(LogLevel::kError, "fatal: " + why);
      if (owns_mpi) MPI_Finalize();
      return 2;
    }
    RegisterBuiltins();

    // Rank 0 validates the environment; a bad knob ends the job with one clear line.
    std::optional<SessionConfig> checked = ConfigFromEnv(rank, size);
    if (!checked) {
      if (owns_mpi) MPI_Finalize();
      return 2;
    }
    SessionConfig config = AgreeOnConfig(*checked);
    AgreeOnJobKnobs(rank);
    trace::StartJob(MPI_COMM_WORLD);
    watchdog::recorder::UseFineClock(trace::Enabled());
    StartWatchdog(rank, size, static_cast<double>(config.timeout_s));

    WorkerInfo info;
    info.worker_id = rank;
    info.num_workers = size;
    info.num_groups = static_cast<int>(config.num_groups);
    info.group_id = rank / (size / info.num_groups);
    info.local_rank = local_rank;
    info.device = CPU();
    info.local_size = local.size;
    DISCO_LOG(INFO) << "disco " << DISCO_VERSION << " rank " << rank << "/" << size
                    << " local_rank " << local_rank << " host " << GetProcessInfo().host << " pid "
                    << getpid() << " world_size " << size << " groups " << info.num_groups
                    << " inline_bytes " << config.inline_bytes << " mpi \"" << mpi::LibraryVersion()
                    << "\" nccl " << DISCO_NCCL_VERSION_STRING << " hdf5 \""
                    << DISCO_HDF5_VERSION_STRING << "\"";

    MpiTransport transport(MPI_COMM_WORLD);
    if (rank == 0) {
      exit_code = RunController(&transport, config, info, controller);
    } else {
      exit_code = RunWorkerLoop(&transport, config, info);
    }
    trace::FinishJob(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    FatalAbort(e.what());
  }
  watchdog::Stop();
  if (owns_mpi) MPI_Finalize();
  return exit_code;
}

}  // namespace disco
