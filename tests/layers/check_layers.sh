#!/usr/bin/env bash
# The layers of src/ point down only. Each directory has a rank; a file may include the private
# headers ("dir/file.h") of its own rank or below:
#   core 0 < protocol 1 < mpi 2 < ccl, io 3 < session 4 < remote 5 < tools, python/src 6
# ccl and io are siblings (neither includes the other), and the collective backends (ccl/mpi/,
# ccl/nccl/) are private to ccl: the session reaches them through ccl/context.h only. Prints
# every include that breaks a rule, and a summary line. Public headers count too (see
# public_rank_of): core's (values, tensors, functions, errors, logging, the worker's identity) are
# for every layer; disco/session.h, graph.h and h5.h (which take a Session) only for the session
# layer and above. Files under models/ may include public headers and their own, nothing of src/.
#   check_layers.sh [SOURCE_DIR]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
rank_of() {
  case $1 in
    core) echo 0 ;; protocol) echo 1 ;; mpi) echo 2 ;; ccl | io) echo 3 ;; session) echo 4 ;;
    remote) echo 5 ;; tools | python) echo 6 ;; *) echo -1 ;;
  esac
}
# The public headers (include/disco) belong to layers too: a file may include those of its own rank
# or below. The umbrella disco.h is for programs (tools).
public_rank_of() {
  case $1 in
    any | config | error | files | function | half | log | tensor | types | worker) echo 0 ;;
    ccl) echo 3 ;; h5 | graph | session) echo 4 ;; remote) echo 5 ;; disco) echo 6 ;; *) echo -1 ;;
  esac
}
bad=0 files=0 includes=0
while IFS= read -r file; do
  files=$((files + 1))
  if [[ $file == python/src/* ]]; then
    layer=python
  elif [[ $file == include/disco/* ]]; then
    layer=${file#include/disco/}
    layer="disco/${layer%.h}"
  else
    layer=${file#src/}
    layer=${layer%%/*}
  fi
  if [[ $layer == disco/* ]]; then mine=$(public_rank_of "${layer#disco/}"); else mine=$(rank_of "$layer"); fi
  while IFS=: read -r line inc; do
    [[ -n $inc ]] || continue
    target=${inc#*\"}
    target=${target%\"*}
    dir=${target%%/*}
    [[ $target == */* ]] || continue  # a header next to the file (python/src)
    includes=$((includes + 1))
    theirs=$(rank_of "$dir")
    ((theirs >= 0)) || continue  # not a layer of src/
    why=""
    if ((theirs > mine)); then
      why="$layer (layer $mine) includes $dir (layer $theirs), which is above it"
    elif [[ $layer != "$dir" && $theirs -eq $mine ]]; then
      why="$layer and $dir are siblings: neither includes the other"
    elif [[ $layer != ccl && ( $target == ccl/mpi/* || $target == ccl/nccl/* ) ]]; then
      why="a collective backend is private to ccl (include ccl/context.h or ccl/communicator.h)"
    fi
    if [[ -n $why ]]; then
      echo "$file:$line: #include \"$target\": $why"
      bad=$((bad + 1))
    fi
  done < <(grep -n '^#include "' "$file" | sed 's/^\([0-9]*\):/\1:/')
  while IFS=: read -r line inc; do
    [[ -n $inc ]] || continue
    header=${inc#*<disco/}
    header=${header%%.h>*}
    includes=$((includes + 1))
    theirs=$(public_rank_of "$header")
    if ((theirs < 0)); then
      echo "$file:$line: #include <disco/$header.h>: a public header with no layer in check_layers.sh"
      bad=$((bad + 1))
    elif ((theirs > mine)); then
      echo "$file:$line: #include <disco/$header.h>: $layer (layer $mine) includes a public header of layer $theirs, which is above it"
      bad=$((bad + 1))
    fi
  done < <(grep -n '^#include <disco/' "$file")
done < <(find src python/src include/disco -name '*.h' -o -name '*.cc' -o -name '*.cu' | sort)
# models/ is written as an outside user would: disco's public headers (<disco/...>) and its own
# ("llama/..."), never a private header of src/.
while IFS= read -r file; do
  files=$((files + 1))
  while IFS=: read -r line inc; do
    [[ -n $inc ]] || continue
    target=${inc#*\"}
    target=${target%\"*}
    includes=$((includes + 1))
    if (($(rank_of "${target%%/*}") >= 0)) || [[ -e src/$target ]]; then
      echo "$file:$line: #include \"$target\": models/ uses only disco's public headers (<disco/...>)"
      bad=$((bad + 1))
    fi
  done < <(grep -n '^#include "' "$file")
done < <(find models -name '*.h' -o -name '*.cc' -o -name '*.cu' 2>/dev/null | sort)
echo "layers: $files files, $includes includes of src/ headers, $bad breaking the rules"
((bad == 0))
