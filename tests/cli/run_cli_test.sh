#!/usr/bin/env bash
# A program's command line (src/tools/cli.h): an unknown option, a misspelled one and a bad number
# (not a number, negative, zero where it means nothing, too large) end the program, on every rank,
# with exit code 2 and one line, printed once, that names the option or the value; --help lists
# every option with its one-line description, once, and exits 0; the fixed command forms, with
# --flag value and --flag=value, still parse.
#   run_cli_test.sh PROGRAM BINARY [LAUNCHER...]
# PROGRAM: disco-bench, disco-demo, disco-demo-mlp, disco-serve, disco-remote or disco-example;
# LAUNCHER: the MPI launcher and its flags ending in "-n 2" (the MPI programs run at 2 ranks, so
# that a line printed by every rank shows twice). disco-bench remote and disco-remote run alone.
set -u
program=$1 bin=$2
shift 2
launch=("$@")
fail=0
bad() { echo "FAIL: $*"; fail=1; }
out="" rc=0
run() {  # [--alone] ARGS...: the program's output (stdout and stderr) in $out, its exit code in $rc
  local how=("${launch[@]}")
  [[ ${1-} == --alone ]] && { how=(); shift; }
  rc=0
  out=$("${how[@]}" "$bin" "$@" 2>&1) || rc=$?
}
# expect_error [--alone] WANT ARGS...: exit code 2, and exactly one line of the program's, which
# contains WANT (a fixed string).
expect_error() {
  local alone=()
  [[ $1 == --alone ]] && { alone=(--alone); shift; }
  local want=$1
  shift
  run "${alone[@]}" "$@"
  local name=${program/-mlp/ --mlp} lines
  lines=$(grep -c "^$name: " <<<"$out")
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep "^$name: " <<<"$out" | grep -qF -- "$want" ||
     grep -qi "MPI_ABORT\|fatal:" <<<"$out"; then
    bad "$name $*: exit code $rc (expected 2), $lines line(s) of $name (expected 1 with '$want'):"
    echo "$out" | head -n 20 | sed 's/^/    /'
  else
    echo "ok: $name $* -> $(grep "^$name: " <<<"$out")"
  fi
}
# expect_help [--alone] ARGS... -- OPTION...: exit code 0, one usage, and each OPTION on a line of
# its own with a description beside it.
expect_help() {
  local alone=()
  [[ $1 == --alone ]] && { alone=(--alone); shift; }
  local args=()
  while [[ $1 != -- ]]; do args+=("$1"); shift; done
  shift
  run "${alone[@]}" "${args[@]}"
  local usages
  usages=$(grep -c "^Usage: " <<<"$out")
  [[ $rc -eq 0 && $usages -eq 1 ]] ||
    { bad "$program ${args[*]}: exit code $rc, $usages usage line(s) (expected 0, 1)"; echo "$out"; return; }
  local opt line
  for opt in "$@"; do
    line=$(grep -E -- "^  (-h,)?$opt( |$)" <<<"$out" | head -n 1)
    # The options' column is 36 characters wide; the description follows on the same line.
    [[ ${line:34:2} == "  " && ${line:36} =~ [a-z] ]] || bad "$program ${args[*]} does not describe $opt on its line: '$line'"
  done
  echo "ok: $program ${args[*]} lists $*"
}

case $program in
  disco-bench)
    expect_error "unknown option '--bogus'" call --bogus
    # Misspelled: --iter for --iters (before CLI11 it ran the default, silently).
    expect_error "unknown option '--iter'" call --iter 100 --iters 50 --latency-iters 5 \
      --repeats 1 --max-bytes 8
    expect_error "unknown option '--iter=100'" graph --iter=100 --iters 50 --repeats 1
    expect_error "--iters: 'abc' is not an integer in 1..1000000000 (disco-bench call --help" \
      call --iters abc
    expect_error "--iters: 'abc' is not an integer in 1..1000000000" call --iters=abc
    expect_error "--repeats: '0' is not an integer in 1..1000000" call --repeats 0
    expect_error "--iters: '-5' is not an integer in 1..1000000000" graph --iters -5
    expect_error "--max-bytes: '99999999999999999999' is not an integer" ccl \
      --max-bytes 99999999999999999999
    expect_error "--min-bytes 65536 is larger than --max-bytes 4096" ccl --min-bytes 65536 \
      --max-bytes 4096
    expect_error "--axis: '3' is not an integer in 1..2" load --axis 3
    expect_error "--op: allreduc not in" ccl --op allreduc
    expect_error "unexpected argument 'cal'" cal
    expect_error "unexpected argument 'graph'" call graph
    expect_error "name a benchmark"
    expect_error "unknown option '--csv'" --csv x.csv
    expect_error --alone "unknown option '--bogus'" remote --bogus
    expect_error --alone "--iters: '0' is not an integer in 1..1000000000" remote --iters 0
    expect_error --alone "--server: give --server or --launch, not both" remote --launch mpirun \
      --server 127.0.0.1:9
    expect_help --help -- call ccl graph load remote -h,--help
    expect_help call --help -- --iters --latency-iters --repeats --max-bytes --csv -h,--help
    expect_help ccl --help -- --ccl --op --min-bytes --max-bytes --repeats --csv --json
    expect_help graph --help -- --iters --repeats --bytes --csv --json
    expect_help load --help -- --bytes --axis --repeats --dir --csv --json
    if grep -q "^  mlp " <<<"$(run --alone --help; echo "$out")"; then  # built with OpenBLAS
      expect_help mlp --help -- --hidden --ffn --layers --tokens --steps --dtype --dir --csv --json
    fi
    expect_help --alone remote --help -- --launch --server --iters --min-bytes --max-bytes \
      --repeats --csv --json
    # Output files are checked before the run, not after it (a FIFO nobody reads blocked the write
    # for good; a directory ended the finished run in MPI_Abort).
    scratch=$(mktemp -d)
    mkfifo "$scratch/fifo"
    mkdir -p "$scratch/out.csv.sync.csv"
    expect_error "--csv: '$scratch' exists and is not a regular file" call --csv "$scratch"
    expect_error "--csv: '$scratch/fifo' exists and is not a regular file" call --csv "$scratch/fifo"
    expect_error "'$scratch/out.csv.sync.csv' exists and is not a regular file" call \
      --csv "$scratch/out.csv"
    expect_error "--json: cannot write '$scratch/no/x.json': no directory '$scratch/no/'" ccl \
      --json "$scratch/no/x.json"
    expect_error --alone "--csv: '$scratch/fifo' exists and is not a regular file" remote \
      --csv "$scratch/fifo"
    # A handful of iterations still times every size: no 'inf' or 'nan' (the sizes over 4 KiB run a
    # quarter of --iters, at least one).
    run call --iters 3 --latency-iters 1 --repeats 1 --max-bytes 65536 --csv "$scratch/ok.csv"
    if [[ $rc -ne 0 ]] || grep -qiE 'inf|nan' <<<"$out" || [[ ! -s $scratch/ok.csv.sync.csv ]]; then
      bad "call --iters 3 ...: exit code $rc, or a figure that is not a number:"
      echo "$out" | head -n 20 | sed 's/^/    /'
    else
      echo "ok: disco-bench call --iters 3 times every size"
    fi
    rm -rf "$scratch"
    # The fixed forms still run: --flag value and --flag=value.
    run call --iters=50 --latency-iters 5 --repeats 1 --max-bytes=8
    [[ $rc -eq 0 ]] && grep -qE '^ +8 ' <<<"$out" || { bad "call --iters=50 ... did not run"; echo "$out"; }
    ;;
  disco-demo)
    expect_error "unknown option '--bogus'" --bogus
    expect_error "unknown option '--max-new-token'" --max-new-token 4
    expect_error "--max-new-tokens: '0' is not an integer in 1..1048576" --max-new-tokens 0
    expect_error "--max-new-tokens: 'many' is not an integer" --max-new-tokens=many
    expect_error "--hidden: '-4' is not an integer" --hidden -4
    expect_error "--prompt: 'x' is not an integer in 0..2147483647" --prompt 1,x,3
    expect_error "--dtype: float16 not in" --dtype float16
    expect_error "disco-demo: --hidden 100 is not a multiple of --heads 8 (give --head-dim) (" \
      --hidden 100 --heads 8
    expect_error "num_attention_heads 8 is not a multiple of num_key_value_heads 3" --kv-heads 3
    expect_error "unexpected argument 'stray'" stray
    # Output files are checked as the options are parsed, not after a whole generation.
    expect_error "--dump-logits: '/tmp' exists and is not a regular file" --dump-logits /tmp
    expect_error "--convert: cannot write '/nonexistent-disco-dir/m.h5': no directory" \
      --convert /nonexistent-disco-dir/m.h5
    expect_help --help -- --mlp --model --prompt --max-new-tokens --dtype --device --calls --warmup \
      --repeat --dump-logits --convert --hidden --layers --heads --kv-heads --head-dim --ffn \
      --vocab --tie-embeddings --seed -h,--help
    ;;
  disco-demo-mlp)
    expect_error "unknown option '--bogus'" --mlp --bogus
    expect_error "unknown option '--layer'" --mlp --layer 2
    expect_error "--steps: '0' is not an integer in 1..1000000" --mlp --steps 0
    expect_error "--tolerance: 'abc' is not a number" --mlp --tolerance abc
    expect_error "--ffn: '99999999999' is not an integer" --mlp --ffn=99999999999
    expect_help --mlp --help -- --hidden --ffn --layers --tokens --steps --warmup --seed --dtype \
      --device --checkpoint --tolerance --calls -h,--help
    ;;
  disco-serve)
    expect_error "unknown option '--bogus'" --bogus 1
    expect_error "unknown option '--port-fil'" --port-fil /nonexistent/port
    expect_error "--port: '70000' is not an integer in 0..65535" --port 70000
    expect_error "--port: 'http' is not an integer in 0..65535" --port=http
    expect_error "--idle-timeout: '-1' is not an integer" --idle-timeout -1
    expect_error "--max-packet-bytes: '10' is not an integer in 4096.." --max-packet-bytes 10
    expect_help --help -- --host --port --key --key-file --port-file --idle-timeout \
      --request-timeout-ms --max-packet-bytes --max-clients --load -h,--help
    ;;
  disco-remote)
    expect_error --alone "unknown option '--bogus'" 127.0.0.1:9 info --bogus
    expect_error --alone "unexpected argument 'shutdwn'" 127.0.0.1:9 shutdwn 3
    expect_error --alone "EXIT_CODE: '256' is not an integer in 0..255" 127.0.0.1:9 shutdown 256
    expect_error --alone "EXIT_CODE: 'abc' is not an integer in 0..255" 127.0.0.1:9 shutdown abc
    expect_error --alone "HOST:PORT: 'nowhere' is not HOST:PORT" nowhere info
    expect_error --alone "name a command" 127.0.0.1:9
    expect_help --alone --help -- HOST:PORT info shutdown -h,--help
    expect_help --alone 127.0.0.1:9 shutdown --help -- EXIT_CODE
    ;;
  disco-example)
    expect_error "unknown option '--bogus'" --bogus
    expect_error "unexpected argument '4'" 4
    expect_help --help -- -h,--help
    ;;
  *)
    echo "run_cli_test.sh: unknown program '$program'" >&2
    exit 2
    ;;
esac
[[ $fail -eq 0 ]] && echo "$program command line: ok"
exit $fail
