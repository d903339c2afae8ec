#!/usr/bin/env bash
# gpu_faults.sh - a failed or hung NCCL exchange in the middle of a sweep on the GPU path, injected
# by the CPU stand-in (CUDAEMU_NCCL_FAULT, tests/cudaemu): with an asynchronous error the ranks'
# polling (ncclCommGetAsyncError) aborts the communicators and exits 1 naming the point; with a
# hang the --timeout watchdog does, within the timeout plus a few seconds. Either way the rows
# completed before are kept, the point named is the first one missing, and --resume finishes the
# sweep. Needs -Dcudaemu=true (exits 77 on a build with the real CUDA and NCCL).
. "$(dirname "$0")/lib.sh"
"$BIN/moeperf-layer" --version >/dev/null
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
BATCHES=(1 2 4 8 16 32 64)
ARGS="--backend cuda --comm nccl --model qwen3-30b-a3b --hidden 128 --ffn 64 --experts 16 --topk 4
      --batch 1:64:x2 --iters 3 --warmup 1 --quiet"

# fault KIND OUT TIMEOUT MESSAGE: the sweep with the 24th NCCL operation of every rank failing
# (KIND error) or never finishing (hang); checks the exit, the message and the rows kept, then
# --resume. Sets `took`, the seconds until the faulty sweep exited.
fault() {
    kind=$1 out=$2 limit=$3
    t0=$SECONDS
    set +e
    # shellcheck disable=SC2086
    CUDAEMU_NCCL_FAULT=$kind:24 mpi 2 "$BIN/moeperf-layer" $ARGS --timeout "$limit" --out "$out" \
        >"$out.log" 2>&1
    rc=$?
    set -e
    took=$((SECONDS - t0))
    [ "$rc" -eq 1 ] || fail "$kind: mpirun exited $rc, expected 1: $(tail -5 "$out.log")"
    kept=$(rows "$out/layer.csv")
    [ "$kept" -ge 1 ] && [ "$kept" -lt ${#BATCHES[@]} ] ||
        fail "$kind: $kept rows kept, expected some but not all ${#BATCHES[@]}"
    col "$out/layer.csv" batch | paste -sd' ' | grep -qx "${BATCHES[*]:0:$kept}" ||
        fail "$kind: the rows kept are not the first $kept points"
    missing=${BATCHES[$kept]}
    msg=$(grep -m1 "$4" "$out.log") || fail "$kind: no message '$4': $(tail -5 "$out.log")"
    grep -q "dispatch dynamic batch $missing\b" <<<"$msg" ||
        fail "$kind: the message does not name the first missing point (batch $missing): $msg"
    echo "$kind: exit 1 after ${took}s, $kept rows kept, batch $missing named: ${msg:0:140}..."
    # shellcheck disable=SC2086
    mpi 2 "$BIN/moeperf-layer" $ARGS --timeout "$limit" --out "$out" --resume >"$out.resume" 2>&1 ||
        fail "$kind: --resume exited $?: $(tail -3 "$out.resume")"
    [ "$(rows "$out/layer.csv")" -eq ${#BATCHES[@]} ] || fail "$kind: --resume left $(rows "$out/layer.csv") rows"
}

fault error "$TMP/error" 60 "NCCL reported 'remote process exited"
fault hang "$TMP/hang" 5 "did not complete within --timeout 5 s"
[ "$took" -le 30 ] || fail "hang: the watchdog took ${took}s for --timeout 5"
echo PASS
