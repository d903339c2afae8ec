#!/usr/bin/env bash
# gpu_check_args.sh - every moeperf-layer and moeperf-ffn command line of ci/gpu-check is accepted
# and passes its --check, run here on the cpu backend: a GPU session is short and rare, so a
# refused combination there (a placement that needs more ranks, a mode a flag excludes) must be
# found before it. Flags only the cuda backend takes (--graph, --gemm) are dropped, batches and
# iterations shrunk; the GPU-only refusals have their own tests (padded.sh, bad_input.sh).
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# the script's command lines, continuations joined
awk '{ if (sub(/\\$/, "")) { buf = buf $0; next } print buf $0; buf = "" }' "$SRC/ci/gpu-check" |
    grep -E '^ *limit [0-9]+ "\$B/bench/moeperf-(layer|ffn)"' >"$TMP/cmds"
n=$(wc -l <"$TMP/cmds")
[ "$n" -ge 5 ] || fail "expected at least 5 moeperf command lines in ci/gpu-check, found $n"
i=0
while IFS= read -r line; do
    i=$((i + 1))
    tool=$(printf '%s\n' "$line" | grep -oE 'moeperf-(layer|ffn)')
    args=$(printf '%s\n' "$line" | sed -E 's/.*"\$B\/bench\/moeperf-(layer|ffn)"//; s/\|\|.*$//;
        s/--backend cuda/--backend cpu/; s/--comm nccl/--comm mpi/; s/ --graph//;
        s/--gemm [^ ]+//; s/--out [^ ]+//; s/--batch [^ ]+/--batch 1,7/; s/--iters [0-9]+/--iters 1/')
    # shellcheck disable=SC2086 # the script's arguments, split as the script splits them
    mpi 1 "$BIN/$tool" $args --warmup 0 --quiet --out "$TMP/run$i" </dev/null >"$TMP/out$i" 2>&1 ||
        fail "ci/gpu-check line $i refused or failed on the cpu backend: $tool $args: $(tail -3 "$TMP/out$i")"
    csv=$TMP/run$i/layer.csv
    [ "$tool" = moeperf-layer ] || csv=$TMP/run$i/ffn.csv
    [ "$(rows "$csv")" -ge 1 ] || fail "line $i wrote no rows"
    if printf '%s\n' "$args" | grep -q -- '--check'; then
        bad=$(col "$csv" check_error | awk '$1 == "" || $1 + 0 > 1e-5' | wc -l)
        [ "$bad" -eq 0 ] || fail "line $i: $bad points failed --check"
    fi
    echo "ci/gpu-check line $i ($tool): $(rows "$csv") points accepted"
done <"$TMP/cmds"
