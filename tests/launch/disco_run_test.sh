#!/usr/bin/env bash
# Command construction of launch/disco-run (--dry-run): workstation, oversubscribed, GPUs,
# Slurm with and without PMIx, root or not, and bad input, under Open MPI and MPICH (hydra); how
# it finds the MPI (--which-mpi). Stubs stand in for srun, id, mpirun and mpichversion.
set -uo pipefail
run=$(cd "$(dirname "$0")/../.." && pwd)/launch/disco-run
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
fails=0 passes=0

check() {  # check NAME EXPECTED-SUBSTRING [UNEXPECTED] -- env... -- args...
  local name=$1 want=$2 unwanted=$3; shift 3
  local out
  out=$(env "$@" 2>&1)
  if [[ $out == *"$want"* && ( -z $unwanted || $out != *"$unwanted"* ) ]]; then
    passes=$((passes + 1))
  else
    echo "FAIL $name: expected '$want'${unwanted:+ without '$unwanted'}, got: $out"
    fails=$((fails + 1))
  fi
}

mkdir -p "$stubs/pmix" "$stubs/nopmix" "$stubs/user" "$stubs/hydra" "$stubs/ompi" \
  "$stubs/mpichversion" "$stubs/pmix-only" "$stubs/none"
printf '#!/bin/sh\n[ "$1" = "--mpi=list" ] && echo "MPI plugin types are... none pmi2 pmix" \n' \
  > "$stubs/pmix/srun"
printf '#!/bin/sh\n[ "$1" = "--mpi=list" ] && echo "MPI plugin types are... none pmi2" \n' \
  > "$stubs/nopmix/srun"
printf '#!/bin/sh\n[ "$1" = "-u" ] && echo 1000 || /usr/bin/id "$@"\n' > "$stubs/user/id"
printf '#!/bin/sh\n[ "$1" = "--mpi=list" ] && echo "MPI plugin types are... none pmix" \n' \
  > "$stubs/pmix-only/srun"
printf '#!/bin/sh\necho "HYDRA build details:"; echo "    Version: 4.0.2"\n' > "$stubs/hydra/mpirun"
printf '#!/bin/sh\necho "mpirun (Open MPI) 4.1.4"\n' > "$stubs/ompi/mpirun"
printf '#!/bin/sh\nexit 1\n' > "$stubs/mpichversion/mpirun"
printf '#!/bin/sh\necho "MPICH Version: 4.0.2"\n' > "$stubs/mpichversion/mpichversion"
printf '#!/bin/sh\nexit 1\n' > "$stubs/none/mpirun"
chmod +x "$stubs"/*/*
# Open MPI unless a case says otherwise (DISCO_RUN_MPI: the MPI this machine has is not asked).
base=(-u SLURM_JOB_ID -u SLURM_NTASKS DISCO_RUN_GPUS=0 DISCO_RUN_MPI=openmpi)
mpich=(-u SLURM_JOB_ID -u SLURM_NTASKS DISCO_RUN_GPUS=0 DISCO_RUN_MPI=mpich)

check workstation "mpirun -n 2 --allow-run-as-root --map-by core --bind-to core ./app a b" "" \
  "${base[@]}" DISCO_RUN_CORES=8 "$run" -n 2 --dry-run -- ./app a b
check oversubscribed "mpirun -n 4 --allow-run-as-root --oversubscribe --bind-to none ./app" "" \
  "${base[@]}" DISCO_RUN_CORES=2 "$run" -n 4 --dry-run -- ./app
check exact-cores "--map-by core --bind-to core" "--oversubscribe" \
  "${base[@]}" DISCO_RUN_CORES=4 "$run" -n 4 --dry-run -- ./app
check gpus "mpirun -n 4 --allow-run-as-root --map-by numa --bind-to numa ./app" "" \
  -u SLURM_JOB_ID DISCO_RUN_MPI=openmpi DISCO_RUN_GPUS=4 DISCO_RUN_CORES=16 "$run" -n 4 --dry-run -- ./app
check more-ranks-than-gpus "--map-by core --bind-to core" "numa" \
  -u SLURM_JOB_ID DISCO_RUN_MPI=openmpi DISCO_RUN_GPUS=2 DISCO_RUN_CORES=16 "$run" -n 4 --dry-run -- ./app
check not-root "mpirun -n 2 --map-by core" "--allow-run-as-root" \
  "${base[@]}" DISCO_RUN_CORES=8 PATH="$stubs/user:$PATH" "$run" -n 2 --dry-run -- ./app
check slurm-pmix "srun --mpi=pmix --kill-on-bad-exit=1 -n 3 ./app" "mpirun" \
  DISCO_RUN_MPI=openmpi SLURM_JOB_ID=7 SLURM_NTASKS=3 PATH="$stubs/pmix:$PATH" "$run" --dry-run -- ./app
check slurm-explicit-n "srun --mpi=pmix --kill-on-bad-exit=1 -n 2 ./app" "" \
  DISCO_RUN_MPI=openmpi SLURM_JOB_ID=7 SLURM_NTASKS=3 PATH="$stubs/pmix:$PATH" "$run" -n 2 --dry-run -- ./app
check slurm-no-pmix "mpirun -n 3 --allow-run-as-root ./app" "--bind-to" \
  DISCO_RUN_MPI=openmpi SLURM_JOB_ID=7 SLURM_NTASKS=3 PATH="$stubs/nopmix:$PATH" "$run" --dry-run -- ./app
# MPICH (hydra): no Open MPI flags as root or past the cores; pmi2 under Slurm, else mpirun.
check mpich-workstation "+ mpirun -n 2 --map-by core --bind-to core ./app" "allow-run-as-root" \
  "${mpich[@]}" DISCO_RUN_CORES=8 "$run" -n 2 --dry-run -- ./app
check mpich-oversubscribed "+ mpirun -n 4 --bind-to none ./app" "oversubscribe" \
  "${mpich[@]}" DISCO_RUN_CORES=2 "$run" -n 4 --dry-run -- ./app
check mpich-gpus "+ mpirun -n 4 --map-by numa --bind-to numa ./app" "" \
  -u SLURM_JOB_ID DISCO_RUN_MPI=mpich DISCO_RUN_GPUS=4 DISCO_RUN_CORES=16 "$run" -n 4 --dry-run -- ./app
check mpich-slurm-pmi2 "srun --mpi=pmi2 --kill-on-bad-exit=1 -n 3 ./app" "pmix" \
  DISCO_RUN_MPI=mpich SLURM_JOB_ID=7 SLURM_NTASKS=3 PATH="$stubs/pmix:$PATH" "$run" --dry-run -- ./app
check mpich-slurm-no-pmi2 "+ mpirun -n 3 ./app" "srun" \
  DISCO_RUN_MPI=mpich SLURM_JOB_ID=7 SLURM_NTASKS=3 PATH="$stubs/pmix-only:$PATH" "$run" --dry-run -- ./app
check unknown-mpi "+ mpirun -n 4 ./app" "--" \
  -u SLURM_JOB_ID -u SLURM_NTASKS DISCO_RUN_MPI=unknown DISCO_RUN_CORES=2 "$run" -n 4 --dry-run -- ./app
check bad-mpi "DISCO_RUN_MPI must be openmpi, mpich or unknown, got 'lam'" "" \
  "${base[@]}" DISCO_RUN_MPI=lam "$run" -n 2 --dry-run -- ./app
# --which-mpi: mpirun's banner, else mpichversion; DISCO_RUN_MPI overrides.
check which-hydra "mpich" "" -u DISCO_RUN_MPI PATH="$stubs/hydra:$PATH" "$run" --which-mpi
check which-openmpi "openmpi" "" -u DISCO_RUN_MPI PATH="$stubs/ompi:$PATH" "$run" --which-mpi
check which-mpichversion "mpich" "" -u DISCO_RUN_MPI PATH="$stubs/mpichversion:/usr/bin:/bin" \
  "$run" --which-mpi
mkdir -p "$stubs/tools"
for tool in bash dirname timeout; do ln -s "$(command -v "$tool")" "$stubs/tools/$tool"; done
check which-none "unknown" "" -u DISCO_RUN_MPI PATH="$stubs/none:$stubs/tools" "$run" --which-mpi
check which-override "mpich" "" DISCO_RUN_MPI=mpich PATH="$stubs/ompi:$PATH" "$run" --which-mpi
# DISCO_RUN_MPIRUN: the launcher run and asked (Debian with both MPIs: mpirun.mpich).
check mpirun-named "+ $stubs/hydra/mpirun -n 2 --map-by core" "allow-run-as-root" \
  -u SLURM_JOB_ID -u SLURM_NTASKS -u DISCO_RUN_MPI DISCO_RUN_GPUS=0 DISCO_RUN_CORES=8 \
  DISCO_RUN_MPIRUN="$stubs/hydra/mpirun" PATH="$stubs/ompi:$PATH" "$run" -n 2 --dry-run -- ./app
# DISCO_RUN_SRUN_MPI: another PMI plugin (Cray's MPICH: cray_shasta).
check srun-mpi-override "srun --mpi=pmi2 --kill-on-bad-exit=1 -n 3 ./app" "pmix" \
  DISCO_RUN_MPI=openmpi DISCO_RUN_SRUN_MPI=pmi2 SLURM_JOB_ID=7 SLURM_NTASKS=3 \
  PATH="$stubs/pmix:$PATH" "$run" --dry-run -- ./app
check hydra-as-root "+ mpirun -n 2 --map-by core" "allow-run-as-root" \
  -u SLURM_JOB_ID -u SLURM_NTASKS -u DISCO_RUN_MPI DISCO_RUN_GPUS=0 DISCO_RUN_CORES=8 \
  PATH="$stubs/hydra:$PATH" "$run" -n 2 --dry-run -- ./app
check default-np "mpirun -n 5" "" "${base[@]}" DISCO_NP=5 DISCO_RUN_CORES=8 "$run" --dry-run -- ./app
check bad-n "needs a positive integer, got '0'" "" "${base[@]}" "$run" -n 0 --dry-run -- ./app
check no-program "no program given" "" "${base[@]}" "$run" -n 2
check unknown-option "unknown option --frobnicate" "" "${base[@]}" "$run" --frobnicate -- ./app
# Input the launcher refuses with one line, and nothing in the environment is ever run.
check n-without-value "-n needs a value" "unbound" "${base[@]}" "$run" -n
check garbage-cores "DISCO_RUN_CORES must be a whole number >= 1, got 'abc'" "unbound" \
  "${base[@]}" DISCO_RUN_CORES=abc "$run" -n 2 --dry-run -- ./app
check negative-cores "DISCO_RUN_CORES must be a whole number >= 1, got '-1'" "" \
  "${base[@]}" DISCO_RUN_CORES=-1 "$run" -n 2 --dry-run -- ./app
check garbage-gpus "DISCO_RUN_GPUS must be a whole number >= 0, got 'x1'" "unbound" \
  -u SLURM_JOB_ID DISCO_RUN_MPI=openmpi DISCO_RUN_GPUS=x1 DISCO_RUN_CORES=4 "$run" -n 2 --dry-run -- ./app
check injection "DISCO_RUN_CORES must be a whole number" "" \
  "${base[@]}" "DISCO_RUN_CORES=np[\$(touch $stubs/injected)]" "$run" -n 2 --dry-run -- ./app
if [[ -e $stubs/injected ]]; then
  echo "FAIL injection: DISCO_RUN_CORES was evaluated"; fails=$((fails + 1))
fi
check dash-program "starts with '-'" "" "${base[@]}" DISCO_RUN_CORES=8 "$run" -n 2 -- -x ./app
check quoted '+ mpirun -n 2 --allow-run-as-root --map-by core --bind-to core ./my\ app a\ b' "" \
  "${base[@]}" DISCO_RUN_CORES=8 "$run" -n 2 --dry-run -- "./my app" "a b"
check key-masked "disco-serve --key '****'" "s3cret" \
  "${base[@]}" DISCO_RUN_CORES=8 "$run" -n 2 --dry-run -- disco-serve --key s3cret
check usage-no-gpus-per-rank "disco-run [-n N]" "gpus-per-rank" "${base[@]}" "$run" --help
# --help-env lists every knob declared in src/core/env_knobs.def.
knobs=$(sed -n 's/^X(\([A-Z_]*\),.*/\1/p' "$(dirname "$0")/../../src/core/env_knobs.def")
for k in $knobs; do check "help-env $k" "$k" "" "${base[@]}" "$run" --help-env; done

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
