# The fault cases: jobs of disco_fault_program (fault_program.cc: one MODE each) that must end
# with the EXIT code given (`nonzero`, or a number), within the time limit, and print a line that
# matches PATTERN (an extended grep regular expression), checked by run_fault_test.sh. Included by
# tests/CMakeLists.txt, which defines disco_fault_test; each row registers mpi.fault.NAME.npNP
# (labels mpi and fault):
#
#   disco_fault_test(NAME  NP  MODE  EXIT
#     PATTERN
#     [ALSO pattern...]      more patterns the output must match
#     [REJECT pattern...]    patterns it must not match
#     [TIMEOUT seconds]      the job's limit: 30 s by default ("promptly", with room for a loaded
#                            CI machine; a hang runs into the watchdog's 300 s, or forever)
#     [ENV VAR=value...])    the job's environment
#
# Each row is preceded by what it proves. The cases that need a command of their own end this file;
# the hang verdicts are in hang_cases.cmake; the fault tests with a program or script of their own
# (a silent rank, the liveness pings attacked, HDF5 saves and loads) are in tests/CMakeLists.txt.

# ---- How a job ends ----------------------------------------------------------------------------
# An exception in the controller's code ends every rank, rank 0 naming it.
disco_fault_test(controller_throws           3 controller-throws           nonzero
  "rank 0/3 [^]]*\\] error: fatal: controller raised .*boom from the controller")
# A worker killed (SIGKILL) while the controller waits on it: the job ends, not hangs.
disco_fault_test(worker_killed               3 kill-worker                 nonzero
  "(signal 9|Killed|killed)")
# A command number skipped on the way: a worker ends the job, naming both numbers.
disco_fault_test(desync                      3 desync                      nonzero
  "fatal: .*desynchronised command stream on worker [12]: expected command #[0-9]+, received #[0-9]+")
# A broadcast frame that is not one of disco's is refused at its first byte.
disco_fault_test(garbled_frame               2 garbled-frame               nonzero
  "fatal: .*malformed message at byte offset 0: bad frame magic")
# A job that ends well exits 0.
disco_fault_test(clean_exit                  4 clean                       0
  "clean shutdown: 4 workers")
# The MPI objects the collectives make (float16/bfloat16 types, user-defined ops) are freed when
# MPI ends: MPICH reports leaked ones on every rank ("yaksa: 2 leaked handle pool objects").
disco_fault_test(mpi_objects_freed           2 ccl-allreduce               0
  "allreduce done on 2 workers"
  REJECT "leaked")
# The controller's return value is the job's exit code.
disco_fault_test(exit_code                   2 exit-code                   3
  "controller returns 3")
# A worker's error the controller never synced on fails the job at shutdown, naming it.
disco_fault_test(unobserved_error            2 unobserved-error            1
  "unobserved remote error .*worker 1 failed in 'fault.throw_on_1'")

# ---- A worker that cannot join a collective ----------------------------------------------------
# A worker that cannot join a collective the others run (its tensor from disco.empty failed to
# allocate there, whose agreement round the others skip; its function or op register failed)
# ends the job at once, naming why, instead of leaving them in the collective.
disco_fault_test(uniform_alloc_fails         3 uniform-alloc-fails         nonzero
  "fatal: disco.allreduce on worker 2: .*holds the failure of an earlier call to 'disco.empty'.*cannot join them")
disco_fault_test(collective_fn_fails         3 collective-fn-fails         nonzero
  "fatal: worker 2 cannot run command #[0-9]+, a collective call on worker 0: .*no function here")
# A graph's collective agreed at its first replay: at a later one, one worker's tensor changes
# shape, or its function fails; the others skip the round, so that worker ends the job, naming the
# graph and the call.
disco_fault_test(graph_shape_changes         3 graph-shape-changes         nonzero
  "fatal: disco.allreduce \\(graph 1 call 1 'disco.allreduce'\\) on worker 2: its tensors' shape, dtype or device changed since the workers agreed")
disco_fault_test(graph_fails_into_collective 3 graph-fails-into-collective nonzero
  "fatal: disco.allreduce \\(graph 1 call 1 'disco.allreduce'\\) on worker 2: .*graph 1 call 0 'fault.activation_on_last'.*asked to fail at this replay.*cannot join them")
disco_fault_test(collective_op_fails         3 op-fails                    nonzero
  "fatal: worker 2 cannot join the collective 'disco.allreduce' .*no op here")

# ---- Knobs and resources -----------------------------------------------------------------------
# Knobs read late (by InitCCL, the HDF5 store) are checked at start-up with the others.
disco_fault_test(bad_ccl_knob                2 clean                       2
  "DISCO_CCL='bogus' is not auto, mpi or nccl"
  ENV DISCO_CCL=bogus)
disco_fault_test(bad_shm_knob                2 clean                       2
  "DISCO_CCL_SHM"
  ENV DISCO_CCL_SHM=yes)
# Unmatched sends pile up with a warning (and a bound), never silently: in the default setting.
disco_fault_test(unmatched_sends             2 unmatched-sends             0
  "sends of this worker are waiting for their receivers .*is a receive missing"
  TIMEOUT 30)
# No /dev/shm segment outlives a job killed while InitCCL makes its shared-memory channels (the
# fixture shm_leak: mpi.fault.no_shm_left, at the end of this file, looks after it).
disco_fault_test(killed_in_initccl           3 initccl-loop                nonzero
  "(signal 9|Killed|killed)"
  TIMEOUT 40)

# ---- The watchdog ends them (DISCO_TIMEOUT=3) --------------------------------------------------
# Each job must end well before the default timeout (300 s; 40 s leaves a loaded machine room for
# start-up), the stuck ranks printing the command, its sequence number and the elapsed time, rank
# 0 naming the rank that never arrived, and the flight recorder dumped.
set(_stuck "watchdog: command #[0-9]+ \\(call_packed 'fault.collective_unless'\\) has run for [0-9.]+ s, past DISCO_TIMEOUT=3 s")
# A worker throws instead of joining a collective.
disco_fault_test(throw_in_collective         3 throw-in-collective         nonzero
  "rank 0/3[^]]*\\] error: ${_stuck}; it waits for rank 2 in a collective, which never arrived"
  TIMEOUT 40 ENV DISCO_TIMEOUT=3)
# A worker returns without joining a collective.
disco_fault_test(skip_collective             4 skip-collective             nonzero
  "rank 0/4[^]]*\\] error: ${_stuck}; it waits for rank 3 in a collective, which never arrived"
  TIMEOUT 40 ENV DISCO_TIMEOUT=3)
# The same inside a replay: the watchdog names the graph and the call the replay is at.
disco_fault_test(skip_collective_in_replay   3 skip-collective-in-replay   nonzero
  "rank 0/3[^]]*\\] error: watchdog: command #[0-9]+ \\(replay_graph 'graph 1'\\) at graph 1 call 1 'fault.collective_unless' has run for [0-9.]+ s, past DISCO_TIMEOUT=3 s; it waits for rank 2 in a collective, which never arrived"
  ALSO "command #[0-9]+ \\(replay_graph 'graph 1'\\): at graph 1 call 1 'fault.collective_unless', running for"
  TIMEOUT 40 ENV DISCO_TIMEOUT=3)
# The watchdog's timeout dumps the flight recorder.
disco_fault_test(timeout_dumps_recorder      3 skip-collective             nonzero
  "flight recorder \\(watchdog timeout\\): the last [0-9]+ of [0-9]+ commands"
  TIMEOUT 40 ENV DISCO_TIMEOUT=3)

# ---- Ranks that die or go wrong; the flight recorder -------------------------------------------
# A worker killed inside a collective ends the job.
disco_fault_test(die_in_collective           3 die-in-collective           nonzero
  "(signal 9|Killed|killed)")
# A corrupted frame on the last rank only: that rank names it.
disco_fault_test(corrupt_one_rank            3 corrupt-one-rank            nonzero
  "rank 2/3[^]]*\\] error: fatal: .*bad frame magic")
# A fatal error dumps the flight recorder.
disco_fault_test(abort_dumps_recorder        4 controller-throws           nonzero
  "flight recorder \\(fatal error\\): the last [0-9]+ of [0-9]+ commands")
# SIGUSR1 dumps it, and the job goes on.
disco_fault_test(sigusr1_dumps_recorder      2 sigusr1                     0
  "flight recorder \\(SIGUSR1\\): the last 1 of 1 commands")
# A SIGUSR1 handler that was there first (the program's; MPICH's MPI_Init installs one too, which
# passes it on) keeps getting the signal, in the job and after it.
disco_fault_test(sigusr1_chains_handlers     1 sigusr1-chained             0
  "flight recorder \\(SIGUSR1\\): the last 1 of 1 commands"
  ALSO "the program's own SIGUSR1 handler ran 1 time\\(s\\) in the job"
  "after the job, SIGUSR1 reached the program's own handler 2 time\\(s\\) in all")

# ---- Cases that need a command of their own (run_fault_test.sh all the same) -------------------
# A per-job knob that differs on one rank: rank 0's value, whole (here 301 characters that parse as
# 1), is every rank's, and the rank that had its own says so in the default log setting.
string(REPEAT "0" 300 DISCO_LONG_KNOB)
add_test(NAME mpi.fault.knob_differs_on_one_rank.np2
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_fault_test.sh --timeout 30 --expect-exit 0
    --expect "DISCO_CCL_SHM=0 on this rank, =0{300}1 on rank 0: rank 0's is used"
    --expect "allreduce done on 2 workers"
    -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${DISCO_MPIEXEC_PREFLAGS}
    bash -c "if [ \"\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-\${PMIX_RANK:-0}}}\" = 0 ]; then export DISCO_CCL_SHM=${DISCO_LONG_KNOB}1; else export DISCO_CCL_SHM=0; fi; exec \"$0\" ccl-allreduce"
    $<TARGET_FILE:disco_fault_program>)
set_tests_properties(mpi.fault.knob_differs_on_one_rank.np2 PROPERTIES LABELS "mpi;fault"
  TIMEOUT 60 ENVIRONMENT "${DISCO_MPI_TEST_ENV};DISCO_TIMEOUT=20")
# killed_in_initccl (above) left no /dev/shm segment behind.
set_tests_properties(mpi.fault.killed_in_initccl.np3 PROPERTIES
  FIXTURES_SETUP shm_leak)
add_test(NAME mpi.fault.no_shm_left
  COMMAND bash -c "! ls /dev/shm | grep -q '^disco-ccl-' || { ls -l /dev/shm; exit 1; }")
set_tests_properties(mpi.fault.no_shm_left PROPERTIES LABELS "mpi;fault" FIXTURES_REQUIRED shm_leak)
# A process started alone while the launcher says the job has more (a PMI mismatch) says so.
add_test(NAME mpi.fault.launcher_mismatch
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_fault_test.sh --timeout 30 --expect-exit 2
    --expect "sees an MPI world of 1 rank, but OMPI_COMM_WORLD_SIZE=4 says the job has 4" --
    ${CMAKE_COMMAND} -E env OMPI_COMM_WORLD_SIZE=4 $<TARGET_FILE:disco_fault_program> clean)
# The same under a PMI-1/2 launcher (hydra, srun --mpi=pmi2), whose hint names the PMI that this
# MPI speaks.
if(DISCO_MPI_FAMILY STREQUAL "mpich")
  set(_pmi "--mpi=pmi2")
else()
  set(_pmi "--mpi=pmix")
endif()
add_test(NAME mpi.fault.launcher_mismatch_pmi
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_fault_test.sh --timeout 30 --expect-exit 2
    --expect "sees an MPI world of 1 rank, but PMI_SIZE=3 says the job has 3.*srun ${_pmi}" --
    ${CMAKE_COMMAND} -E env PMI_SIZE=3 $<TARGET_FILE:disco_fault_program> clean)
# (No leak check here in sanitizer builds: LeakSanitizer's tracer crashes in an Open MPI singleton
# whose launcher environment is wrong, before disco has done anything.)
set_tests_properties(mpi.fault.launcher_mismatch mpi.fault.launcher_mismatch_pmi PROPERTIES
  LABELS "mpi;fault" TIMEOUT 60 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
