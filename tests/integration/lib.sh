# lib.sh - what every integration test sources: the build paths, a scratch directory removed on
# exit, mpirun with the settings tests need, and CSV column access by name.
set -eu
BUILD=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
BIN=$BUILD/bench
TMP=$(mktemp -d "${TMPDIR:-/tmp}/moeperf-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# Open MPI's transports between ranks: the tests' ranks share one host, so shared memory alone (the
# TCP transport's start-up probes every interface, seconds per run in a sanitizer build); the
# emulated clusters of ci/emucluster choose theirs on mpirun's command line, which takes precedence.
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
# OpenBLAS starts a thread per core when it loads, which polls for work for a tenth of a second or
# so before it sleeps: CPU time in every binary started, though none of them asks it for threads
# (the cpu backend runs each rank's GEMMs on one: kernels/cpu/cpu_compute.c)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# skip REASON: this machine cannot judge what the test checks (too noisy, hardware absent): says
# why and exits 77, which meson counts as skipped.
skip() {
    echo "SKIP: $*"
    exit 77
}

# mpi NP CMD...: mpirun for tests: root allowed (CI runs as root), more ranks than cores, ranks
# that yield while waiting when there are more ranks than cores, so oversubscribed runs stay usable,
# and always in the fast tier, whose three builds' suites share the cores (ci/test) and judge no time.
mpi() {
    np=$1
    shift
    yield=0
    [ "$np" -le "$(nproc)" ] && [ "${MOEPERF_TEST_TIER:-all}" != fast ] || yield=1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle $yield -np "$np" "$@"
}

# col FILE NAME: the values of column NAME, one per line (exit 3 if there is no such column).
col() {
    awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; if (!c) exit 3; next }
                       { print $c }' "$1"
}

# rows FILE: number of data rows.
rows() {
    echo $(($(wc -l <"$1") - 1))
}

# emu_up EMUCLUSTER NAME ARGS...: bring up an emulated cluster (ci/emucluster up --name NAME
# ARGS...); skips the test (77) where network namespaces cannot be made, fails on any other error.
emu_up() {
    emu=$1 name=$2
    shift 2
    rc=0
    "$emu" up --name "$name" "$@" >/dev/null 2>"$TMP/up.err" || rc=$?
    [ "$rc" -ne 77 ] || { echo "SKIP: $(cat "$TMP/up.err")"; exit 77; }
    [ "$rc" -eq 0 ] || fail "ci/emucluster up exited $rc: $(cat "$TMP/up.err")"
}

# refused CMD...: CMD must exit 2 (a usage error); prints the one-line reason it gave.
refused() {
    set +e
    "$@" >/dev/null 2>"$TMP/refused.err"
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || fail "$* exited $rc, expected 2: $(cat "$TMP/refused.err")"
    echo "refused: $(cat "$TMP/refused.err")"
}

# sanitizer_build: prints the sanitizers $BUILD was configured with (b_sanitize, from meson's
# introspection file, else `meson introspect`), or "none".
sanitizer_build() {
    python3 - "$BUILD" <<'PY' 2>/dev/null || meson introspect --buildoptions "$BUILD" 2>/dev/null |
import json, os, sys
path = os.path.join(sys.argv[1], "meson-info", "intro-buildoptions.json")
v = next((o["value"] for o in json.load(open(path)) if o["name"] == "b_sanitize"), "none")
print(",".join(v) or "none" if isinstance(v, list) else v)  # a list in newer meson
PY
        python3 -c 'import json, sys
v = next((o["value"] for o in json.load(sys.stdin) if o["name"] == "b_sanitize"), "none")
print(",".join(v) or "none" if isinstance(v, list) else v)' 2>/dev/null || echo none
}

# The tier a test runs in (MOEPERF_TEST_TIER, set by tests/meson.build): "fast" judges what the
# programs compute and write and no timing; "perf" judges only the timing studies (ratios, rooflines,
# false alarms, margins between measured times), in a build without sanitizers; "all", the default
# when a script is run by hand, judges both.
TIER=${MOEPERF_TEST_TIER:-all}
case $TIER in
fast | perf | all) ;;
*) fail "MOEPERF_TEST_TIER=$TIER: expected fast, perf or all" ;;
esac
# the fast tier judges no roofline and no cold-cache time: the compute backends measure a small
# roofline (milliseconds instead of seconds in every rank of every measured run) and --flush-cache
# sweeps 8 MiB instead of twice the last-level cache or L2, which some hosts report as hundreds of
# MiB (kernels/compute.h, mp_compute_quick)
[ "$TIER" != fast ] || export MOEPERF_TEST_QUICK=${MOEPERF_TEST_QUICK:-1}

# timing_study WHAT: whether this run judges the timing study WHAT. Not in the fast tier (it says so
# and returns 1); in a sanitizer build, which slows every access unevenly, the perf tier skips (77)
# and "all" returns 1, saying why; otherwise returns 0.
timing_study() {
    if [ "$TIER" = fast ]; then
        echo "$1: a timing study, judged in the perf tier"
        return 1
    fi
    san=$(sanitizer_build)
    [ "$san" = none ] && return 0
    [ "$TIER" = perf ] && skip "$1 is a timing study; this build is instrumented with" \
        "-fsanitize=$san, which slows it unevenly (run it in a release build)"
    echo "$1 not judged: a timing study, and this build is instrumented with -fsanitize=$san"
    return 1
}

# perf_tier_only WHAT: for a test that is a timing study as a whole: skips (77) in the fast tier and,
# like timing_study, in a sanitizer build.
perf_tier_only() {
    [ "$TIER" != fast ] || skip "$1 is a timing study, run in the perf tier (ci/test --tier perf)"
    timing_study "$1" || skip "$1 is a timing study; not judged in a sanitizer build"
}

# checks_tier: whether this run judges what is not timing (fast or all; the perf tier leaves the
# checks to the fast tier and judges only the timing studies).
checks_tier() {
    [ "$TIER" != perf ]
}

# skip_timing_in_sanitizer_build WHAT: a timing study means nothing in a sanitizer build (ASan and
# UBSan slow every access, unevenly); skips the test (77) saying so in such a build.
skip_timing_in_sanitizer_build() {
    san=$(sanitizer_build)
    [ "$san" = none ] && return 0
    echo "SKIP: $1 is a timing study; this build is instrumented with -fsanitize=$san, which" \
        "slows it unevenly (run it in a release build)"
    exit 77
}

# node_groups_ran ERRFILE LABEL: the MOEPERF_TEST_GROUPS lines of a 4-rank --dedup node run over 2
# nodes (ERRFILE, its stderr) say every rank ran its exchanges on the intra-node and inter-node
# groups of 2 ranks and none on the EP group of 4; prints the counts, or fails naming LABEL.
node_groups_ran() {
    python3 - "$1" "$2" <<'PY' || fail "node's phases ($2) did not run on the node groups"
import re, sys
pat = re.compile(r"rank (\d+): exchanges on ep \(4 ranks\) (\d+), ep-intra-node \(2 ranks\) (\d+), "
                 r"ep-inter-node \(2 ranks\) (\d+)$")
seen = {}
for line in open(sys.argv[1]):
    m = pat.search(line.strip())
    if m:
        seen[int(m[1])] = [int(x) for x in m.groups()[1:]]
assert sorted(seen) == [0, 1, 2, 3], open(sys.argv[1]).read()[-2000:]
for r, (ep, intra, inter) in seen.items():
    assert ep == 0 and intra > 0 and inter > 0, (sys.argv[2], r, ep, intra, inter)
print(sys.argv[2], "exchanges per rank on ep, intra-node, inter-node:", seen)
PY
}

# require_cuda_device: one small moeperf-layer run on the GPU path; skips (77) where it finds no
# CUDA device, fails on any other error.
require_cuda_device() {
    set +e
    "$BIN/moeperf-layer" --backend cuda --comm nccl --hidden 64 --ffn 64 --batch 1 --iters 1 \
        --quiet 2>"$TMP/probe"
    probe_rc=$?
    set -e
    if [ $probe_rc -ne 0 ] && grep -q "no CUDA device" "$TMP/probe"; then
        echo "no CUDA device: skipped"
        exit 77
    fi
    [ $probe_rc -eq 0 ] || fail "probe run: $(cat "$TMP/probe")"
}
