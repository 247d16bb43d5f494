# The hang matrix (docs/errors.md): jobs of disco_fault_program (fault_program.cc: one MODE each)
# that hang on purpose. With DISCO_TIMEOUT=3, each must end non-zero with one line of rank
# PRINTER's ("hang culprit: ..." or "hang culprits: ...") naming the rank(s) that hold the others
# up and why: VERDICT, a regular expression for the rest of that line. It must come at most 8 s
# (DISCO_TIMEOUT + 5) after the job printed "hang begins" (run_fault_test.sh stamps every line),
# and the job must end within 40 s. Included by tests/CMakeLists.txt, which defines
# disco_hang_test; each row registers hang.NAME.npNP (labels hang and fault):
#
#   disco_hang_test(NAME  NP  MODE
#     VERDICT
#     [PRINTER rank]               the rank whose line it is: 0 by default
#     [REJECT regex...]            patterns the output must not match
#     [ENV VAR=value...]           the job's environment
#     [LAUNCHER_FLAGS flag...]     the launcher's, after its usual ones
#     [REQUIRES variable])         registered only where the variable is set (not empty)
#
# Each row is preceded by what it proves. The hang matrix's stuck remote client is
# hang.remote_client_stalled (tests/remote/run_stalled_client_test.sh, in tests/CMakeLists.txt).
set(_s "[0-9]+\\.[0-9] s")

# ---- A rank's own code does not return ---------------------------------------------------------
# A worker spins in its function; the others wait in the collective after it.
disco_hang_test(function_stuck               4 hang-spin
  "rank 3 \\([^)]*\\) is still running 'fault.spin_on' \\(command #[0-9]+\\) for ${_s}, outside any collective: its own code does not return; ranks 0, 1, 2 wait in 'disco.allreduce'")
# The same on rank 0, whose worker shares the process with the controller.
disco_hang_test(function_stuck_on_rank0      3 hang-spin-on-0
  "rank 0 \\([^)]*\\) is still running 'fault.spin_on' \\(command #[0-9]+\\) for ${_s}, outside any collective")
# A worker spins inside a collective function, before its collective: the others wait in it.
disco_hang_test(stuck_before_collective      3 hang-spin-in-collective
  "rank 2 \\([^)]*\\) is still running 'fault.collective_unless' \\(command #[0-9]+\\) for ${_s}, outside any collective: its own code does not return; ranks 0, 1 wait in 'fault.collective_unless'")
# The most common shape: a function stuck on one rank, the controller in SyncAll (a reduction
# over every rank, which the ranks before the stuck one in its tree pass): only the stuck rank.
disco_hang_test(function_stuck_then_sync     4 hang-spin-sync
  "rank 3 \\([^)]*\\) is still running 'fault.spin_on' \\(command #[0-9]+\\) for ${_s}, outside any collective: its own code does not return(;|$)"
  REJECT "hang culprits")

# ---- MPI calls from outside disco --------------------------------------------------------------
# One worker enters an MPI_Barrier of its own that the others never join.
disco_hang_test(foreign_mpi_call             3 hang-foreign-mpi
  "(ranks 0, 2 \\([^)]*\\)|rank 0 \\([^)]*\\) finished .*; rank 2 \\([^)]*\\)) finished 'fault.foreign_barrier_on' \\(command #[0-9]+\\) without joining the MPI_Barrier \\(called from outside disco \\(disco_fault_program\\)\\) that rank 1 is inside.*; rank 1 waits inside MPI_Barrier in 'fault.foreign_barrier_on'")
# The controller's own code enters an MPI_Barrier.
disco_hang_test(controller_in_foreign_mpi_call 3 hang-controller-mpi
  "rank 0 \\([^)]*\\) is inside MPI_Barrier, called from outside disco \\(disco_fault_program\\) in the controller's own code")

# ---- A rank skips its collective ---------------------------------------------------------------
# The last worker returns from a collective function without joining its collective.
disco_hang_test(skipped_collective           4 skip-collective
  "rank 3 \\([^)]*\\) finished 'fault.collective_unless' \\(command #[0-9]+\\) without joining its collective( \\(it has run to command #[0-9]+ since\\))?; ranks 0, 1, 2 wait in 'fault.collective_unless'")
# The same inside a replay: the verdict names the graph and the call.
disco_hang_test(skipped_collective_in_replay 3 skip-collective-in-replay
  "rank 2 \\([^)]*\\) finished graph 1 call 1 'fault.collective_unless' \\(command #[0-9]+\\) without joining its collective( \\(it has run to command #[0-9]+ since\\))?; ranks 0, 1 wait in graph 1 call 1 'fault.collective_unless'")

# ---- A rank stopped or dead --------------------------------------------------------------------
# A worker stopped (SIGSTOP) inside a collective answers no state request.
disco_hang_test(stopped_rank                 3 hang-stop-in-collective
  "rank 2 \\([^)]*\\) answered no state request: dead, stopped, or its node is off the network; ranks 0, 1 wait in 'fault.collective_unless'")
# The same for a dead one (SIGKILL), under a launcher that does not end the job when a rank dies.
disco_hang_test(dead_rank                    3 hang-die-in-collective
  "rank 2 \\([^)]*\\) answered no state request: dead, stopped, or its node is off the network; ranks 0, 1 wait in 'fault.collective_unless'"
  LAUNCHER_FLAGS ${DISCO_MPIEXEC_KEEP_GOING} REQUIRES DISCO_MPIEXEC_KEEP_GOING)
# A rank stopped at the first command, while the controller waits in SyncAll (no command is
# timed): it never answered a liveness ping, while the other ranks of its host did.
disco_hang_test(stopped_at_start             3 hang-stop-early
  "rank 2 \\([^)]*\\) answered no state request: dead, stopped, or its node is off the network")
# Rank 0 stopped inside a collective: a worker gives the verdict, at once, and only one worker.
disco_hang_test(stopped_rank0                3 hang-stop-rank0
  "rank 0 \\([^)]*\\) answered no state request: dead, stopped, or its node is off the network; ranks 1, 2 wait in 'fault.collective_unless'"
  PRINTER 1 REJECT "rank 2/3[^]]*\\] error: watchdog: hang culprit")

# ---- Point-to-point, and I/O -------------------------------------------------------------------
# A receive whose sender never sends.
disco_hang_test(receive_without_sender       3 hang-recv
  "rank 2 \\([^)]*\\) finished 'fault.recv_on' \\(command #[0-9]+\\) without joining its collective( \\(it has run to command #[0-9]+ since\\))?; rank 1 waits in 'fault.recv_on'")
# Two ranks each receive from the other.
disco_hang_test(deadlock                     3 hang-deadlock
  "ranks 0, 1 wait for each other \\(0 for 1 in 'fault.recv_on' \\(command #[0-9]+\\), 1 for 0 in 'fault.recv_on' \\(command #[0-9]+\\)\\): a deadlock")
# An HDF5 read that never returns on one rank (stall_io.c, preloaded, stalls it) is named, with
# the file and the dataset.
disco_hang_test(hdf5_read_stalled            3 hang-h5-read
  "rank 1 \\([^)]*\\) is still (running|in) 'disco.h5.load' \\(command #[0-9]+\\) for ${_s}, HDF5 read of '[^']*hang_h5_read.h5' dataset 'w'"
  ENV "LD_PRELOAD=$<TARGET_FILE:disco_stall_io>" "DISCO_TEST_STALL_RANK=1"
      "DISCO_TEST_H5_PATH=${CMAKE_CURRENT_BINARY_DIR}/hang_h5_read.h5"
      "DISCO_TEST_STALL_PATH=${CMAKE_CURRENT_BINARY_DIR}/hang_h5_read.h5"
      "DISCO_H5_INDEPENDENT=1")
