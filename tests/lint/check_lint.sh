#!/usr/bin/env bash
# The lint stage: the C++ of include/ src/ python/src models/ bench/ examples/ tests/ is formatted
# (.clang-format) and clean of the clang-tidy checks .clang-tidy chooses (it says why each).
#   check_lint.sh format SOURCE_DIR            clang-format --dry-run --Werror on every file
#   check_lint.sh tidy SOURCE_DIR BUILD_DIR    run-clang-tidy -j2 on every .cc file of this source
#                                              tree in BUILD_DIR/compile_commands.json (a build
#                                              configured with CMAKE_EXPORT_COMPILE_COMMANDS=ON;
#                                              configured is enough: nothing is compiled)
# Prints each finding; exits 1 on one, 0 when clean, 77 when a tool or the database is missing
# (the CTest test skips, saying which: Debian's clang-format and clang-tidy packages).
set -uo pipefail
what=${1:-}
root=${2:-}
[[ -n $root ]] || { echo "usage: check_lint.sh format|tidy SOURCE_DIR [BUILD_DIR]" >&2; exit 2; }
root=$(cd "$root" && pwd) || exit 2
need() {  # need TOOL: 77 (skip) when it is not installed
  command -v "$1" >/dev/null && return 0
  echo "SKIP: $1 is not installed (Debian package ${2:-$1})"
  exit 77
}
case $what in
  format)
    need clang-format
    cd "$root" || exit 2
    mapfile -t files < <(find include src python/src models bench examples tests -type f \
      \( -name '*.cc' -o -name '*.h' -o -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) | sort)
    echo "+ clang-format --dry-run --Werror (${#files[@]} files)"
    printf '%s\0' "${files[@]}" | xargs -0 -n 50 clang-format --dry-run --Werror
    rc=$?
    (( rc == 0 )) && echo "clang-format: ${#files[@]} files formatted" && exit 0
    echo "FAIL: clang-format would change the files above: clang-format -i FILE..."
    exit 1
    ;;
  tidy)
    build=${3:-}
    [[ -n $build ]] || { echo "usage: check_lint.sh tidy SOURCE_DIR BUILD_DIR" >&2; exit 2; }
    need clang-tidy
    need run-clang-tidy clang-tidy
    if [[ ! -f $build/compile_commands.json ]]; then
      echo "SKIP: no $build/compile_commands.json (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)"
      exit 77
    fi
    # The .cc files of this tree (not nvcc's .cu, whose flags clang does not take, nor C).
    re="^$(printf '%s' "$root" | sed 's/[][\.*^$+?(){}|]/\\&/g')/.*\\.cc\$"
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    echo "+ run-clang-tidy -quiet -p $build -j${DISCO_LINT_JOBS:-2} '$re'"
    run-clang-tidy -quiet -p "$build" -j"${DISCO_LINT_JOBS:-2}" "$re" >"$log" 2>&1
    rc=$?
    # Its findings (and errors), without the colours, the commands and the counts of suppressed
    # warnings (system headers) around them.
    sed 's/\x1b\[[0-9;]*m//g' "$log" |
      grep -vE '^(clang-tidy(-[0-9]+)? |[0-9]+ warnings? (and [0-9]+ errors? )?generated\.|Suppressed [0-9]+ warnings|Use -header-filter)'
    n=$(grep -c '^clang-tidy' "$log")
    (( rc == 0 )) && echo "clang-tidy: $n files clean" && exit 0
    echo "FAIL: clang-tidy found the above in $n files (.clang-tidy lists the checks; a deliberate"
    echo "exception takes // NOLINT(check-name): why)"
    exit 1
    ;;
  *)
    echo "usage: check_lint.sh format|tidy SOURCE_DIR [BUILD_DIR]" >&2
    exit 2
    ;;
esac
