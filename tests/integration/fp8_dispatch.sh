#!/usr/bin/env bash
# fp8_dispatch.sh - --dispatch-dtype fp8 on the measured path (cpu + mpi), H = 200 (a last block of
# 72 values): on 1, 2 and 4 ranks, uniform, zipf and gate routing, contiguous and replicate-hot:2
# placements, dynamic, padded and pipelined dispatch, --dedup pair and rank (and node, whose relays
# unpack and re-pack the rows they forward, across 2 emulated nodes in a build without sanitizers,
# dynamic, padded and pipelined), --check passes (the tight bound against the
# reference of the quantized inputs, and the loose one against the unquantized inputs); every
# point's dispatch bytes, per link class, are its dispatched rows × (H + 4·⌈H/128⌉ + metadata)
# exactly, its combine bytes rows × 4H as before; the fp8 point moves the bf16 point's rows (its
# bf16 dispatch bytes rescaled; gate routing included: a sweep's bf16 and fp8 points run on the
# same tokens) and the same combine bytes. --dispatch-dtype fp16 is refused naming the flag, and
# --hidden 1 naming the least H; where the cuda backend starts, it dispatches in fp8 too (one rank,
# --check) and refuses --hidden 3 naming 4 (its bf16 rows are shorter).
. "$(dirname "$0")/lib.sh"
LAYER=$BIN/moeperf-layer
H=200
shape="--hidden $H --ffn 32 --experts 8 --topk 2 --shared 1 --iters 1 --warmup 0 --quiet
    --no-flush-cache --check --dispatch-dtype bf16,fp8"
sweep="--batch 24 --routing uniform,zipf:1.2,gate --placement contiguous,replicate-hot:2"

# bytes DIR...: every point of each run directory's layer_ranks.csv against the byte formula
# (fp8_bytes.py), after its --check
bytes() {
    python3 - "$H" "$(dirname "$0")" "$@" <<'PY'
import csv, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[2])
import fp8_bytes
H = int(sys.argv[1])
assert fp8_bytes.fp8_row(H) == 208
for d in sys.argv[3:]:
    for p in csv.DictReader(open(d + "/layer.csv")):
        assert float(p["check_error"]) <= 1e-5, (d, p["check_error"])
# the cpu backend's fp32 row (bf16: as it is), top-2
checked, same, _ = fp8_bytes.check(sys.argv[3:], H, 2, 4 * H)
assert checked > 0 and same > 0, (checked, same)
print(f"{checked} points' bytes by the formula, {same} ranks' bytes against bf16")
PY
}

# 1, 2 and 4 ranks: dynamic and padded (lossless and a capacity that drops), pair and rank
# shellcheck disable=SC2086
"$LAYER" $shape $sweep --out "$TMP/r1" || fail "1-rank fp8 exit $?"
# shellcheck disable=SC2086
mpi 2 "$LAYER" $shape $sweep --dispatch dynamic,padded,padded:1.2 --dedup pair,rank \
    --out "$TMP/r2" || fail "2-rank fp8 exit $?"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $shape $sweep --layout tp1ep4,tp2ep2 --dispatch dynamic,padded --dedup pair,rank \
    --out "$TMP/r4" || fail "4-rank fp8 exit $?"
# pipelined (chunks in flight): pair and rank
# shellcheck disable=SC2086
mpi 4 "$LAYER" $shape $sweep --layout tp1ep4 --overlap 2 --dedup pair,rank --out "$TMP/p4" ||
    fail "4-rank pipelined fp8 exit $?"
bytes "$TMP/r1" "$TMP/r2" "$TMP/r4" "$TMP/p4" || fail "fp8 dispatch bytes"
python3 - "$TMP/r1" <<'PY' || fail "1 rank: bytes on the wire"
import csv, sys
for r in csv.DictReader(open(sys.argv[1] + "/layer_ranks.csv")):
    assert float(r["bytes_sent"]) == 0, r  # one rank: nothing leaves it
PY

# 2 emulated nodes × 2 ranks: --dedup node's relays re-pack the rows they forward
if [ "$(sanitizer_build)" = none ] && command -v ip >/dev/null 2>&1; then
    EMU=$(cd "$(dirname "$0")/../.." && pwd)/ci/emucluster
    NAME=f8$$
    trap '"$EMU" down --name "$NAME" >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
    if "$EMU" up --name "$NAME" --nodes 2 --ranks-per-node 2 --rate 0 >/dev/null 2>"$TMP/up.err"; then
        # shellcheck disable=SC2086
        "$EMU" run --name "$NAME" -- "$LAYER" $shape --batch 24 --routing uniform,gate \
            --placement contiguous,replicate-hot:2 --layout tp1ep4 --dedup pair,rank,node \
            --dispatch dynamic,padded --timeout 120 --out "$TMP/n4" >/dev/null 2>"$TMP/n.err" ||
            fail "2-node fp8 exit $?: $(cat "$TMP/n.err")"
        # shellcheck disable=SC2086
        "$EMU" run --name "$NAME" -- "$LAYER" $shape --batch 24 --routing zipf:1.2 \
            --layout tp1ep4 --dedup rank,node --overlap 2 --timeout 120 --out "$TMP/o4" \
            >/dev/null 2>"$TMP/n.err" || fail "2-node pipelined fp8 exit $?: $(cat "$TMP/n.err")"
        python3 - "$TMP/n4" <<'PY' || fail "2 nodes: no inter-node bytes"
import csv, sys
assert {r["node"] for r in csv.DictReader(open(sys.argv[1] + "/layer_ranks.csv"))} == {"0", "1"}
ranks = list(csv.DictReader(open(sys.argv[1] + "/layer_ranks.csv")))
assert any(float(r["dispatch_bytes_internode"]) > 0 for r in ranks
           if r["dedup"] == "node" and r["dispatch_dtype"] == "fp8")
PY
        bytes "$TMP/n4" "$TMP/o4" || fail "2-node fp8 dispatch bytes"
    else
        echo "note: no emulated nodes here ($(cat "$TMP/up.err")); --dedup node across nodes not run"
    fi
fi

# bad input
refused "$LAYER" --dispatch-dtype fp16 --batch 1 --iters 1 --quiet
grep -q -- "--dispatch-dtype" "$TMP/refused.err" || fail "the fp16 refusal does not name the flag"
grep -q "bf16|fp8" "$TMP/refused.err" || fail "the fp16 refusal does not say what is accepted"
refused "$LAYER" --hidden 1 --ffn 8 --experts 4 --topk 1 --dispatch-dtype fp8 --batch 1 --iters 1 \
    --quiet
grep -q -- "--hidden 2 or more" "$TMP/refused.err" || fail "the --hidden 1 refusal: $(cat "$TMP/refused.err")"
# the cuda backend (where it starts: a GPU or the CUDA stand-in of a -Dcudaemu=true build) packs in
# fp8 too: one rank passes --check (tests/integration/gpu_fp8.sh has the modes and the bytes); its
# bf16 rows of 2H bytes hold a packed row from H = 4 on, so --hidden 3 is refused naming 4
{
    set +e
    CUDAEMU_DEVICES=${CUDAEMU_DEVICES:-1} "$LAYER" --backend cuda --comm nccl --hidden 200 --ffn 32 \
        --experts 4 --topk 2 --dispatch-dtype bf16,fp8 --batch 3 --iters 1 --check --quiet \
        --out "$TMP/cuda" >/dev/null 2>"$TMP/cuda.err"
    rc=$?
    set -e
    if grep -q -e "no CUDA device" -e "cuda is not built into this binary" "$TMP/cuda.err"; then
        echo "note: the cuda backend is not built or does not start here; its fp8 dispatch not run"
    else
        [ "$rc" -eq 0 ] || fail "--backend cuda --dispatch-dtype fp8 exited $rc: $(cat "$TMP/cuda.err")"
        [ "$(col "$TMP/cuda/layer.csv" dispatch_dtype | sort | paste -sd,)" = bf16,fp8 ] ||
            fail "the cuda run's points: $(col "$TMP/cuda/layer.csv" dispatch_dtype | paste -sd,)"
        CUDAEMU_DEVICES=${CUDAEMU_DEVICES:-1} refused "$LAYER" --backend cuda --comm nccl \
            --hidden 3 --ffn 8 --experts 4 --topk 1 --dispatch-dtype fp8 --batch 1 --iters 1 --quiet
        grep -q -- "--hidden 4 or more" "$TMP/refused.err" ||
            fail "the cuda --hidden 3 refusal: $(cat "$TMP/refused.err")"
    fi
}
echo "fp8_dispatch: ok"
