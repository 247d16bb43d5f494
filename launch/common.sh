# Shared by launch/demo and launch/test (sourced, not run): installs the Debian packages disco
# needs when they are missing, then configures and builds into build/ (or $DISCO_BUILD_DIR).
DISCO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DISCO_BUILD_DIR=${DISCO_BUILD_DIR:-$DISCO_ROOT/build}
# The MPI: DISCO_MPI=openmpi|mpich, else the one this machine has (launch/disco-run --which-mpi
# asks its mpirun), else Open MPI, Debian's default. Each has its own package set (parallel HDF5
# is built per MPI); MPICH's never brings Open MPI in, so a machine that has MPICH keeps it.
DISCO_MPI=${DISCO_MPI:-}
disco_packages() {
  if [[ -z $DISCO_MPI ]]; then
    DISCO_MPI=$(DISCO_RUN_MPI="" "$DISCO_ROOT/launch/disco-run" --which-mpi 2>/dev/null || true)
    [[ $DISCO_MPI == mpich ]] || DISCO_MPI=openmpi
  fi
  local mpi
  case $DISCO_MPI in
    openmpi) mpi=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev) ;;
    mpich) mpi=(mpich libmpich-dev libhdf5-mpich-dev) ;;
    *) echo "DISCO_MPI must be openmpi or mpich, not '$DISCO_MPI'" >&2; exit 2 ;;
  esac
  DISCO_PACKAGES=(cmake g++ make pkg-config "${mpi[@]}" libdlpack-dev libgtest-dev libssl-dev
    nlohmann-json3-dev libcli11-dev libopenblas-dev libpcre2-dev libsentencepiece-dev libutf8proc-dev
    pybind11-dev python3-dev python3-numpy python3-jinja2 libcpp-httplib-dev)
}
disco_packages

disco_ensure_packages() {
  local missing=() p
  for p in "${DISCO_PACKAGES[@]}" "$@"; do
    # Debian builds mpi4py against Open MPI only: on MPICH it would bring Open MPI in.
    [[ $DISCO_MPI == mpich && $p == python3-mpi4py ]] && continue
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "disco needs these Debian packages; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "+ apt-get install -y ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

disco_build() {
  local args=(-S "$DISCO_ROOT" -B "$DISCO_BUILD_DIR" -DCMAKE_BUILD_TYPE=${DISCO_BUILD_TYPE:-RelWithDebInfo})
  echo "+ cmake ${args[*]} $*"
  cmake "${args[@]}" "$@" >"$DISCO_BUILD_DIR.configure.log" 2>&1 || {
    cat "$DISCO_BUILD_DIR.configure.log" >&2
    exit 1
  }
  grep -A7 "disco .* configuration:" "$DISCO_BUILD_DIR.configure.log" || true
  # DISCO_BUILD_TARGETS: only these targets (space-separated), else all.
  local targets=()
  # shellcheck disable=SC2206  # split into words on purpose
  [[ -n ${DISCO_BUILD_TARGETS:-} ]] && targets=(--target $DISCO_BUILD_TARGETS)
  echo "+ cmake --build $DISCO_BUILD_DIR -j${DISCO_BUILD_JOBS:-2} ${targets[*]}"
  cmake --build "$DISCO_BUILD_DIR" -j"${DISCO_BUILD_JOBS:-2}" "${targets[@]}"
}

# The virtual environment of the tests against transformers itself (tests/llama/
# run_families_test.sh): torch (the CPU wheels of download.pytorch.org, else PyPI's, which bring
# CUDA's libraries: 5.6 GiB), transformers 5, safetensors, numpy and openai, at $DISCO_HF_VENV (.venv-hf at
# the top of the tree, ignored by git). Made once (about 3 minutes) and reused: .disco-ready marks
# a complete one. Its log: $DISCO_HF_VENV.log. Needs PyPI; without it the test skips, saying so.
DISCO_HF_VENV=${DISCO_HF_VENV:-$DISCO_ROOT/.venv-hf}
export DISCO_HF_VENV
# sentencepiece<0.2: as Debian's libsentencepiece (0.1.97), which 0.2 differs from on ties
# (tests/tokenizer/check_tokenizers.py compares the two).
disco_hf_venv() {
  local v=$DISCO_HF_VENV py=python3
  if [[ -f $v/.disco-ready ]]; then
    # What was added since the environment was made (sentencepiece: tests/tokenizer; openai:
    # tests/server, the official client against disco-llm-server).
    "$v/bin/python" -c 'import sentencepiece, openai' 2>/dev/null ||
      nice "$v/bin/pip" install "sentencepiece<0.2" "openai>=1,<3" >>"$v.log" 2>&1 || true
    return 0
  fi
  [[ -x /usr/bin/python3 ]] && py=/usr/bin/python3  # Debian's, which python3-venv serves
  rm -rf "$v"
  {
    nice "$py" -m venv "$v" &&
      { nice "$v/bin/pip" install --retries 1 --timeout 30 torch \
          --index-url https://download.pytorch.org/whl/cpu ||
        nice "$v/bin/pip" install torch; } &&
      nice "$v/bin/pip" install "transformers>=5,<6" safetensors numpy "sentencepiece<0.2" \
        "openai>=1,<3" &&
      "$v/bin/python" -c 'import numpy, openai, safetensors, sentencepiece, tokenizers, torch, transformers' &&
      touch "$v/.disco-ready"
  } >"$v.log" 2>&1
}

# Open MPI refuses to run as root without these; harmless for other users and MPIs.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
fi
