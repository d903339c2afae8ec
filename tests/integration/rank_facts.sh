#!/usr/bin/env bash
# rank_facts.sh - run.json's per-rank placement facts: local ranks from mpirun's variable, the CPU
# binding a launcher gave (or none), NUMA node and nearest NIC from hwloc; --cpu-bind auto leaves a
# cpu-backend rank where it was; a stale launcher variable is overruled by the shared-memory split
# with one warning; ranks that share CPUs are warned about once and run.json says so.
. "$(dirname "$0")/lib.sh"

RUN="--bytes 1K --iters 2 --warmup 0 --quiet"

# facts DIR PYTHON: run the assertions in PYTHON with `d` the run.json of DIR and `hw` whether the
# build has hwloc (without it every placement fact must be null)
facts() {
    python3 - "$1/run.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
hw = d["topology"].get("hwloc") is not None
exec(sys.argv[2])
PY
}

mpi 2 "$BIN/moeperf-a2a" $RUN --out "$TMP/unbound" || fail "moeperf-a2a exit $?"
facts "$TMP/unbound" '
assert d["local_rank_from"] == "OMPI_COMM_WORLD_LOCAL_RANK", d["local_rank_from"]
assert d["cpu_bind_policy"] == "auto"
assert sorted(r["local_rank"] for r in d["ranks"]) == [0, 1]
for r in d["ranks"]:
    assert r["gpu_pci"] is None and r["gpu_numa"] is None, r
    if not hw:
        assert r["cpu_bind"] is None and r["cpu_bound"] is None and r["numa"] is None, r
        continue
    assert r["cpu_bound"] is False, r       # mpirun --bind-to none, and auto does not bind CPU ranks
    assert r["numa_from"] == "last_cpu", r
    assert r["numa"] is not None, r
    assert r["nics"] is None or r["nics_near"] == "cpu", r
' || fail "unbound ranks: run.json facts wrong"

# one rank pinned by the launcher to its first allowed CPU: the pin is kept and reported
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[-,].*//')
taskset -c "$cpu" "$BIN/moeperf-a2a" $RUN --cpu-bind auto --out "$TMP/pinned" ||
    fail "pinned moeperf-a2a exit $?"
facts "$TMP/pinned" "
r = d['ranks'][0]
if hw:
    assert r['cpu_bind'] == '$cpu', r
    assert r['cpu_bound'] is True and r['numa_from'] == 'binding' and r['numa'] is not None, r
" || fail "a pinned rank: run.json facts wrong"

# a local rank left in the environment by an outer launch: the split is used, with a warning
SLURM_LOCALID=5 "$BIN/moeperf-a2a" $RUN --out "$TMP/stale" 2>"$TMP/stale.err" ||
    fail "moeperf-a2a with a stale SLURM_LOCALID exit $?"
grep -q "SLURM_LOCALID.*using the shared-memory split" "$TMP/stale.err" ||
    fail "no warning naming SLURM_LOCALID: $(cat "$TMP/stale.err")"
[ "$(grep -c warning "$TMP/stale.err")" -eq 1 ] || fail "more than one warning: $(cat "$TMP/stale.err")"
facts "$TMP/stale" '
assert d["local_rank_from"] == "shared-memory split", d["local_rank_from"]
assert d["ranks"][0]["local_rank"] == 0
' || fail "stale SLURM_LOCALID: run.json facts wrong"

# ranks that share CPUs: two on CPU 0 say so in one warning line and in run.json; two unbound
# ranks on a host of 2 or more CPUs say nothing
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    mpi 2 taskset -c 0 "$BIN/moeperf-a2a" $RUN --out "$TMP/shared" 2>"$TMP/shared.err" ||
        fail "two ranks on CPU 0: exit $?"
    [ "$(grep -c 'warning: 2 ranks on .* share 1 CPU(s)' "$TMP/shared.err")" -eq 1 ] ||
        fail "two ranks on one CPU: no single warning line: $(cat "$TMP/shared.err")"
    grep -q '"binding_warning":[[:space:]]*"2 ranks on .* share 1 CPU(s)' "$TMP/shared/run.json" ||
        fail "run.json does not record the binding warning"
    mpi 2 "$BIN/moeperf-a2a" $RUN --out "$TMP/apart" 2>"$TMP/apart.err" || fail "two ranks: exit $?"
    ! grep -q "share" "$TMP/apart.err" && ! grep -q binding_warning "$TMP/apart/run.json" ||
        fail "two unbound ranks on $(nproc) CPUs were warned about: $(cat "$TMP/apart.err")"
fi

refused "$BIN/moeperf-a2a" $RUN --cpu-bind gpu
refused "$BIN/moeperf-a2a" $RUN --cpu-bind numa
echo "rank_facts: ok"
