#!/usr/bin/env bash
# gpu_check_args.sh - every moeperf-layer and moeperf-ffn command line of ci/gpu-check is accepted
# and passes its --check, run here on the cpu backend: a GPU session is short and rare, so a
# refused combination there (a placement that needs more ranks, a mode a flag excludes) must be
# found before it. Flags only the cuda backend takes (--graph, --gemm) are dropped, batches,
# iterations and FFN widths (--ffn 64) shrunk; the GPU-only refusals have their own tests (padded.sh, bad_input.sh).
# With MOEPERF_GPU_CHECK_ON=cuda (the gpu suite of a -Dcudaemu=true build) the lines run as they
# are, on the cuda and nccl backends, with layers shrunk for the CPU stand-in (--hidden 128,
# --ffn 64), and ci/ffn-table must print the FFN table from what the moeperf-ffn lines wrote; on
# either, ci/fetch-rate must print the expert-cache line's fetch rates.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
on=${MOEPERF_GPU_CHECK_ON:-cpu}
case $on in
cpu) shrink='s/--backend cuda/--backend cpu/; s/--comm nccl/--comm mpi/; s/ --graph//; s/--gemm [^ ]+//;
        s/--ffn [0-9]+/--ffn 64/'
    tol=1e-5 ;;
cuda) shrink='s/--hidden [0-9]+//; s/--ffn [0-9]+/--ffn 64 --hidden 128/'
    tol=2e-2 ;; # the cuda backend's bf16 tolerance (its check_tolerance)
*) fail "MOEPERF_GPU_CHECK_ON=$on: cpu or cuda" ;;
esac

# the script's command lines, continuations joined, each after the GEMM variants of the `for g in
# ...; do` loop it is in ("-" outside one) and a tab
awk '{ if (sub(/\\$/, "")) { buf = buf $0; next } print buf $0; buf = "" }' "$SRC/ci/gpu-check" |
    awk '/^for g in [a-z ]+; do$/ { g = $0; sub(/^for g in /, "", g); sub(/; do$/, "", g); next }
         /^done$/ { g = "" }
         /^ *limit [0-9]+ "\$B\/bench\/moeperf-(layer|ffn)"/ { print (g == "" ? "-" : g) "\t" $0 }' >"$TMP/cmds"
n=$(wc -l <"$TMP/cmds")
[ "$n" -ge 5 ] || fail "expected at least 5 moeperf command lines in ci/gpu-check, found $n"
g_list=$(cut -f1 "$TMP/cmds" | tr ' ' '\n' | awk 'NF && $0 != "-" && !seen[$0]++' | tr '\n' ' ')
[ "$(wc -w <<<"$g_list")" -ge 3 ] || fail "no 'for g in' loop over the GEMM variants in ci/gpu-check"
i=0
declare -A ran # the shrunk command lines already run: on the cpu backend the GEMM variants are one
while IFS=$'\t' read -r loop line; do
    tool=$(printf '%s\n' "$line" | grep -oE 'moeperf-(layer|ffn)')
    base=$(printf '%s\n' "$line" | sed -E 's/.*"\$B\/bench\/moeperf-(layer|ffn)"//; s/\|\|.*$//;
        '"$shrink"'; s/--out [^ ]+//; s/--batch [^ ]+/--batch 1,7/; s/--iters [0-9]+/--iters 1/')
    grep -q -- '--ffn ' <<<"$base" || fail "a line sets no --ffn, which the cuda run shrinks: $line"
    gemms=-
    grep -qF -- '$g' <<<"$base" && gemms=$loop # its `for g in ...` loop's variants
    [ "$gemms" != - ] || ! grep -qF -- '$g' <<<"$base" || fail "a \$g line outside a 'for g in' loop: $line"
    for g in $gemms; do
        i=$((i + 1))
        args=${base//\$g/$g}
        [ -z "${ran[$tool $args]:-}" ] || continue
        ran[$tool $args]=1
        variant=$(grep -oE -- '--gemm [a-z]+' <<<"$args" | cut -d' ' -f2 || true)
        variant=${variant:-loop}$(grep -q -- ' --graph' <<<"$args" && echo +graph || true)
        ! grep -q -- '--weight-dtype fp8' <<<"$args" || variant=fp8-$variant # as ci/gpu-check names them
        # shellcheck disable=SC2086 # the script's arguments, split as the script splits them
        mpi 1 "$BIN/$tool" $args --warmup 0 --quiet --out "$TMP/run$i" </dev/null >"$TMP/out$i" 2>&1 ||
            fail "ci/gpu-check line $i refused or failed on the $on backend: $tool $args: $(tail -3 "$TMP/out$i")"
        csv=$TMP/run$i/layer.csv
        if [ "$tool" = moeperf-ffn ]; then
            csv=$TMP/run$i/ffn.csv
            mkdir -p "$TMP/ffn-$variant"
            cp "$csv" "$TMP/ffn-$variant/ffn.csv"
        fi
        [ "$(rows "$csv")" -ge 1 ] || fail "line $i wrote no rows"
        if printf '%s\n' "$args" | grep -q -- '--check'; then
            # fp8 weights: at least 1e-3 (MP_FP8_WEIGHT_TIGHT, core/layer/layer.h)
            bad=$(paste -d' ' <(col "$csv" check_error) <(col "$csv" weight_dtype) |
                awk -v tol=$tol '{ t = $2 == "fp8" && tol < 1e-3 ? 1e-3 : tol }
                                 $1 == "" || $1 + 0 > t' | wc -l)
            [ "$bad" -eq 0 ] || fail "line $i: $bad points failed --check"
        fi
        if grep -q -- '--expert-cache' <<<"$args"; then # ci/gpu-check's ci/fetch-rate on it
            "$SRC/ci/fetch-rate" "$TMP/run$i" >"$TMP/fetch$i" || fail "ci/fetch-rate on line $i exited $?"
            grep -qE '^uniform +1 +0 ' "$TMP/fetch$i" || fail "ci/fetch-rate printed no batch-1 row: $(cat "$TMP/fetch$i")"
        fi
        echo "ci/gpu-check line $i ($tool $variant): $(rows "$csv") points accepted"
    done
done <"$TMP/cmds"
if [ "$on" = cuda ]; then
    "$SRC/ci/ffn-table" "$TMP"/ffn-*/ffn.csv >"$TMP/table" || fail "ci/ffn-table exited $?"
    cat "$TMP/table"
    for v in loop grouped skinny fused loop+graph grouped+graph skinny+graph fused+graph \
        fp8-loop+graph fp8-grouped+graph fp8-skinny+graph fp8-fused+graph; do
        head -2 "$TMP/table" | tail -1 | grep -qF " ${v}_us " || fail "the FFN table has no $v column"
    done
    # a row per batch (1 and 7), 2 + 3 numeric columns per variant each
    nv=$(ls -d "$TMP"/ffn-*/ | wc -l)
    n=$(awk -v nf=$((2 + 3 * nv)) 'NF == nf && $1 ~ /^[0-9]+$/' "$TMP/table" | wc -l)
    [ "$n" -eq 2 ] || fail "the FFN table has $n complete batch rows of $nv variants, expected 2"
    # the targets' judges: a verdict on batch 1 (the stand-in's times miss every target)
    "$SRC/ci/ffn-targets" "$TMP/ffn-fused+graph/ffn.csv" >"$TMP/targets" && fail "ci/ffn-targets met a target on the stand-in: $(cat "$TMP/targets")"
    grep -qE '^fused\+graph +batch +1 .*MISSED$' "$TMP/targets" || fail "ci/ffn-targets judged no batch 1: $(cat "$TMP/targets")"
fi
echo PASS
