#!/usr/bin/env bash
# gpu_faults.sh - faults of the GPU path injected by the CPU stand-in (CUDAEMU_NCCL_FAULT and
# friends, tests/cudaemu). A failed or hung NCCL exchange in the middle of a sweep: with an
# asynchronous error the ranks' polling (ncclCommGetAsyncError) aborts the communicators and exits
# 1 naming the point; with a hang the --timeout watchdog does, within the timeout plus a few
# seconds; with a failure on one rank alone, whose exchange stays queued on its device, that rank
# aborts its communicators before freeing anything and every rank ends at once. Each time the rows
# completed before are kept, the point named is the first one missing, and --resume finishes the
# sweep. Then: a communicator set-up or split that never returns ends within --timeout; two ranks
# on one GPU are refused (exit 2) before NCCL refuses them, unless each rank has its own
# NCCL_HOSTID; the stand-in itself refuses them and a communicator used after ncclCommAbort; an
# NCCL older than 2.18 is refused; each rank's device is chosen before MPI_Init. Needs
# -Dcudaemu=true (exits 77 on a build with the real CUDA and NCCL).
. "$(dirname "$0")/lib.sh"
"$BIN/moeperf-layer" --version >/dev/null
[ -n "${CUDAEMU_DEVICES:-}" ] || { echo "not the CPU stand-in: skipped"; exit 77; }
BATCHES=(1 2 4 8 16 32 64)
ARGS="--backend cuda --comm nccl --model qwen3-30b-a3b --hidden 128 --ffn 64 --experts 16 --topk 4
      --batch 1:64:x2 --iters 3 --warmup 1 --quiet"

# fault SPEC OUT TIMEOUT MESSAGE: the sweep with CUDAEMU_NCCL_FAULT=SPEC (error:24: the 24th NCCL
# operation of every rank fails; hang:24: it never finishes; fail:23@1: rank 1's 23rd never
# finishes and its next call fails); checks the exit, the message and the rows kept, then
# --resume. Sets `took`, the seconds until the faulty sweep exited, and leaves its log in OUT.log.
fault() {
    kind=$1 out=$2 limit=$3
    t0=$SECONDS
    set +e
    # shellcheck disable=SC2086
    CUDAEMU_NCCL_FAULT=$kind mpi 2 "$BIN/moeperf-layer" $ARGS --timeout "$limit" --out "$out" \
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
    # shellcheck disable=SC2086 # (no fault now: a deadline as long as a loaded machine needs)
    mpi 2 "$BIN/moeperf-layer" $ARGS --timeout 300 --out "$out" --resume >"$out.resume" 2>&1 ||
        fail "$kind: --resume exited $?: $(tail -3 "$out.resume")"
    [ "$(rows "$out/layer.csv")" -eq ${#BATCHES[@]} ] || fail "$kind: --resume left $(rows "$out/layer.csv") rows"
}

# the deadline of the hung steps: three times the longest step before the hang on a loaded machine
# (a point here takes well under a second, a communicator set-up less)
HUNG=3
fault error:24 "$TMP/error" 60 "NCCL reported 'remote process exited"
fault hang:24 "$TMP/hang" $HUNG "did not complete within --timeout $HUNG s"
[ "$took" -le 30 ] || fail "hang: the watchdog took ${took}s for --timeout $HUNG"
# one rank fails alone with its dispatch still queued: freeing the layer would wait for it for ever
# unless that rank aborts its communicators first; no rank waits for its --timeout
fault fail:23@1 "$TMP/alone" 30 "rank 1 .*grouped ncclSend/ncclRecv of the ep exchange"
! grep -m1 "did not complete within" "$TMP/alone.log" ||
    fail "fail@1: a rank waited for its --timeout instead of ending with the failing one"

# mpi_within SECONDS NP CMD...: mpi, killed after SECONDS (exit 124) should it hang
mpi_within() {
    limit=$1
    shift
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout "$limit" mpirun --oversubscribe --bind-to none -np "$@"
}

ONE="--backend cuda --comm nccl --model qwen3-30b-a3b --hidden 128 --ffn 64 --experts 16 --topk 4
     --batch 4 --iters 1 --warmup 1 --quiet"
# a communicator set-up (ncclCommInitRank: set-up 1) or split (ncclCommSplit: set-up 2) that never
# returns on one rank, as over a wrong NCCL_SOCKET_IFNAME: every rank ends within --timeout, exit 1
for spec in "bootstrap:1@1 NCCL communicator set-up" "bootstrap:2@0 NCCL communicator split"; do
    set +e
    # shellcheck disable=SC2086
    CUDAEMU_NCCL_FAULT=${spec%% *} mpi_within 120 2 "$BIN/moeperf-layer" $ONE --timeout $HUNG \
        >"$TMP/setup.log" 2>&1
    rc=$?
    set -e
    [ "$rc" -eq 1 ] || fail "${spec%% *}: exited $rc, expected 1: $(tail -3 "$TMP/setup.log")"
    grep -q "at point ${spec#* }.*did not complete within --timeout $HUNG s" "$TMP/setup.log" ||
        fail "${spec%% *}: no watchdog message naming the ${spec#* }: $(tail -3 "$TMP/setup.log")"
    echo "${spec%% *}: exit 1, the watchdog named the ${spec#* }"
done

# two ranks on the one emulated GPU of a host: refused on every rank (exit 2), naming both ranks,
# the host and the likely causes, before NCCL's own refusal
set +e
# shellcheck disable=SC2086
CUDAEMU_DEVICES=1 mpi_within 120 2 "$BIN/moeperf-layer" $ONE >"$TMP/dup.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "two ranks on one GPU: exited $rc, expected 2: $(tail -3 "$TMP/dup.log")"
msg=$(grep -m1 "ranks 0 and 1 both drive GPU 0000:10:00.0 on $(hostname)" "$TMP/dup.log") ||
    fail "two ranks on one GPU: no message naming both ranks and the host: $(tail -3 "$TMP/dup.log")"
grep -q "CUDA_VISIBLE_DEVICES" <<<"$msg" || fail "two ranks on one GPU: no likely cause: $msg"
! grep -q "Duplicate GPU" "$TMP/dup.log" || fail "two ranks on one GPU: NCCL was reached first"
echo "two ranks on one GPU: exit 2: ${msg:0:100}..."
# with an NCCL_HOSTID of its own each rank is another host to NCCL: the run works
# shellcheck disable=SC2016,SC2086
CUDAEMU_DEVICES=1 mpi 2 sh -c 'NCCL_HOSTID=moeperf-test-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
    "$BIN/moeperf-layer" $ONE --check >"$TMP/hostid.log" 2>&1 ||
    fail "one GPU, an NCCL_HOSTID per rank: exited $?: $(tail -3 "$TMP/hostid.log")"
echo "one GPU, an NCCL_HOSTID per rank: --check passes"

# the stand-in refuses as NCCL does when moeperf's check is not there to refuse first
CHECK=$BUILD/tests/cudaemu_nccl_check
mpi 2 "$CHECK" duplicate >"$TMP/direct.log" 2>&1 || fail "ncclCommInitRank on one GPU: $(cat "$TMP/direct.log")"
[ "$(grep -c "invalid usage" "$TMP/direct.log")" -eq 2 ] ||
    fail "ncclCommInitRank on one GPU: not refused on both ranks: $(cat "$TMP/direct.log")"
# shellcheck disable=SC2016
mpi 2 sh -c 'NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec "$0" duplicate' "$CHECK" >"$TMP/direct.log" 2>&1 ||
    fail "ncclCommInitRank on one GPU, an NCCL_HOSTID per rank: $(cat "$TMP/direct.log")"
set +e
mpi 1 "$CHECK" after-abort >"$TMP/abort.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] && grep -q "used after ncclCommAbort freed it" "$TMP/abort.log" ||
    fail "a communicator used after ncclCommAbort went unnoticed (exit $rc): $(head -3 "$TMP/abort.log")"
echo "stand-in: refuses two ranks on one GPU, works with an NCCL_HOSTID each, catches use after abort"

# an NCCL without ncclCommSplit (older than 2.18): refused at start, exit 1, one message
set +e
# shellcheck disable=SC2086
CUDAEMU_NCCL_VERSION=2.17.1 mpi 2 "$BIN/moeperf-layer" $ONE >"$TMP/old.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "NCCL 2.17.1: exited $rc, expected 1: $(tail -3 "$TMP/old.log")"
[ "$(grep -c "NCCL library loaded is 2.17.1; moeperf needs NCCL 2.18" "$TMP/old.log")" -eq 1 ] ||
    fail "NCCL 2.17.1: not one message naming the version: $(tail -3 "$TMP/old.log")"
echo "NCCL 2.17.1: refused"

# each rank's device is current before MPI_Init: the launcher's local rank 1 on device 1
# shellcheck disable=SC2086
CUDAEMU_TRACE=1 mpi 2 "$BIN/moeperf-layer" $ONE >"$TMP/trace.log" 2>&1 ||
    fail "CUDAEMU_TRACE run exited $?: $(tail -3 "$TMP/trace.log")"
for lr in 0 1; do
    grep -q "MPI_Init.* with device $lr current (chosen by cudaSetDevice; launcher local rank $lr)" \
        "$TMP/trace.log" || fail "local rank $lr: its device was not chosen before MPI_Init: $(grep cudaemu "$TMP/trace.log")"
done
echo "devices chosen before MPI_Init: $(grep -c "chosen by cudaSetDevice" "$TMP/trace.log") ranks"
echo PASS
