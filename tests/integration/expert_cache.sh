#!/usr/bin/env bash
# expert_cache.sh - moeperf-layer --expert-cache on the cpu backend, 2 ranks, 32 experts (16 a
# rank), top-4, batch 512: every expert has rows in every iteration (the coldest, under hot:4:15,
# about 23), so the accesses are a cyclic scan of a rank's 16 experts in expert order and the
# policies' counts are known exactly: a cache of all 16 hits every access after the warm-up; lru and lfu below 16 slots miss every access
# (the scan evicts each expert before its next use); static keeps its SLOTS experts (the hottest:
# 0-3 under hot:4:15 on rank 0) and fetches the rest, so it beats lru; every fetch moves one
# expert's bytes, and --check passes with every policy and slot count, in bf16 and fp8 weights.
# On traces of uniform, hot:4:15 and zipf:1.2 at batch 16 (experts left without rows) every
# rank-iteration's hits and misses are an independent simulation's, and static beats lru under
# the hot trace at 2, 4 and 8 slots. moeperf-ffn's cache counts as the layer's, and on the model
# as measured.
. "$(dirname "$0")/lib.sh"
W="--hidden 64 --ffn 64 --experts 32 --topk 4 --shared 1 --batch 512 --iters 3 --warmup 2 --quiet"
mpi 2 "$BIN/moeperf-layer" $W --routing uniform,hot:4:15 --weight-dtype bf16,fp8 \
    --expert-cache off,16,16:static,8,4:lru,4:lfu,4:static,2 --check --out "$TMP/run" ||
    fail "moeperf-layer --expert-cache exit $?"
python3 - "$TMP/run" <<'PY' || fail "the expert cache's counts are not the policies'"
import csv, sys
d = sys.argv[1]
rows = lambda f: list(csv.DictReader(open(f"{d}/{f}", newline="")))
H, Dl = 64, 64
def expert_bytes(wdtype):  # one expert's [Wg | Wu] and Wd as the cpu backend stores them
    if wdtype == "bf16":  # fp32 elements on the cpu backend
        return (H * 2 * Dl + Dl * H) * 4
    # the fp8 images as stored (base/fp8.h): parts·N columns of K codes, K rounded up to 16, then
    # one fp32 scale per 128-block of N and K, the K-blocks rounded up to 4
    image = lambda k, n, parts: parts * n * (-(-k // 16) * 16) + 4 * parts * -(-n // 128) * (-(-(-(-k // 128)) // 4) * 4)
    return image(H, Dl, 2) + image(Dl, H, 1)
n = 0
for r in rows("layer_rank_samples.csv"):
    cache, hits, misses = r["expert_cache"], float(r["cache_hits"]), float(r["cache_misses"])
    fetched = float(r["fetch_bytes"])
    assert fetched == misses * (expert_bytes(r["weight_dtype"]) if cache != "off" else 0), r
    if cache == "off":
        assert hits == misses == 0, r
        continue
    slots, policy = cache.split(":")
    slots = int(slots)
    assert hits + misses == 16, (cache, hits, misses)  # every local expert, once an iteration
    if policy == "static":
        want = slots  # its resident experts, the rest fetched into the staging slot
    else:
        want = 16 if slots == 16 else 0  # the cyclic scan: all resident, or evicted before reuse
    assert hits == want, (r["routing"], cache, r["rank"], r["iter"], hits, want)
    n += 1
print(f"{n} rank-iterations: hits, misses and bytes as the policies predict")
for r in rows("layer.csv"):  # no point computes less than the reference says
    assert r["check_error"] != "" and float(r["check_error"]) <= (1e-3 if r["weight_dtype"] == "fp8" else 1e-5), r
    if r["expert_cache"] == "off":
        assert r["cache_hit_rate"] == "" and float(r["fetch_bytes"]) == 0, r
hot = {(r["expert_cache"], r["weight_dtype"]): float(r["cache_hit_rate"]) for r in rows("layer.csv")
       if r["routing"] == "hot:4:15" and r["expert_cache"] != "off"}
assert hot[("4:static", "bf16")] == 0.25 > hot[("4:lru", "bf16")] == 0, hot
print("static beats lru under hot:4:15:", hot[("4:static", "bf16")], "against", hot[("4:lru", "bf16")])
PY
# static's resident set is the routing's hottest: under hot:4:15 rank 0's experts 0-3, whose rows
# are most of its rows, so its hits carry more rows than its misses (the timeline's experts name
# them: rank 0 holds 0-15)
[ "$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["routing"] == "hot:4:15" && $c["expert_cache"] == "4:static" && $c["rank"] == 0 { print $c["local_experts"] }' \
    "$TMP/run/layer_ranks.csv" | sort -u)" = "0-15" ] || fail "rank 0 does not hold experts 0-15"
# Routings whose draws leave experts without rows: per-token traces (docs/CSV.md) drawn here
# from uniform, hot:4:15 and zipf:1.2 over 32 experts (top-4 distinct, a fixed permutation of the
# ids for zipf so its hot experts fall on both ranks), batch 16, one draw per step: warm-up 2 and
# 10 timed, past the 8 draws a point without a cache cycles through (a cached point draws every
# step afresh, core/workload/routing.h). An independent simulation of each rank's cache over those draws
# (its local experts with rows, in expert order, warm-up first; lru, lfu with ties to the least
# recently used, static's resident set the trace's most frequent local experts, ties to the lower
# id) predicts every rank's hits and misses in every timed iteration exactly.
python3 - "$TMP" <<'PY'
import random
rng = random.Random(7)
E, K, TOK = 32, 4, 16 * 12
perm = list(range(E))
rng.shuffle(perm)
weights = {"uniform": [1.0] * E, "hot": [15.0 if e < 4 else 1.0 for e in range(E)],
           "zipf": [0.0] * E}
for i in range(E):
    weights["zipf"][perm[i]] = 1.0 / (i + 1) ** 1.2
for name, w in weights.items():
    with open(f"{__import__('sys').argv[1]}/trace-{name}.csv", "w") as f:
        f.write("token," + ",".join(f"expert{k}" for k in range(K)) + "\n")
        for t in range(TOK):
            left, ids = list(range(E)), []
            for _ in range(K):
                e = rng.choices(left, [w[x] for x in left])[0]
                left.remove(e)
                ids.append(e)
            f.write(f"{t}," + ",".join(map(str, ids)) + "\n")
PY
routings=$(printf 'trace:%s,' "$TMP/trace-uniform.csv" "$TMP/trace-hot.csv" "$TMP/trace-zipf.csv")
mpi 2 "$BIN/moeperf-layer" --hidden 64 --ffn 64 --experts 32 --topk 4 --shared 1 --batch 16 \
    --iters 10 --warmup 2 --quiet --routing "${routings%,}" \
    --expert-cache 16,8,8:lfu,8:static,4,4:lfu,4:static,2,2:lfu,2:static --check \
    --out "$TMP/traces" || fail "moeperf-layer --expert-cache on traces exit $?"
python3 - "$TMP" <<'PY' || fail "the expert cache's counts are not the simulation's"
import csv, sys
d = sys.argv[1]
E, K, B, RANKS, WARMUP, ITERS = 32, 4, 16, 2, 2, 10
L = E // RANKS
def simulate(trace, slots, policy, rank):
    rows = [list(map(int, r[1:])) for r in list(csv.reader(open(trace)))[1:]]
    freq = [0] * E
    for r in rows:
        for e in r:
            freq[e] += 1
    local = list(range(rank * L, rank * L + L))
    static = sorted(local, key=lambda e: (-freq[e], e))[:slots]
    resident, last, uses, clock, out = set(), {}, {e: 0 for e in local}, 0, []
    for step in range(WARMUP + ITERS):
        draw = rows[step * B:(step + 1) * B]
        hit = miss = 0
        for e in sorted({e for r in draw for e in r} & set(local)):
            if policy == "static":
                hit, miss = hit + (e in static), miss + (e not in static)
                continue
            clock += 1
            uses[e] += 1
            if e in resident:
                hit += 1
            else:
                miss += 1
                if len(resident) == slots:
                    key = (lambda x: last[x]) if policy == "lru" else (lambda x: (uses[x], last[x]))
                    resident.remove(min(resident, key=key))
                resident.add(e)
            last[e] = clock
        out.append((hit, miss))
    return out[WARMUP:]
n, rate = 0, {}
for r in csv.DictReader(open(f"{d}/traces/layer_rank_samples.csv")):
    slots, policy = r["expert_cache"].split(":")
    want = simulate(r["routing"][6:], int(slots), policy, int(r["rank"]))[int(r["iter"])]
    got = (int(float(r["cache_hits"])), int(float(r["cache_misses"])))
    assert got == want, (r["routing"], r["expert_cache"], r["rank"], r["iter"], got, want)
    n += 1
for r in csv.DictReader(open(f"{d}/traces/layer.csv")):
    assert r["check_error"] != "" and float(r["check_error"]) <= 1e-5, r
    rate[(r["routing"].split("trace-")[1][:-4], r["expert_cache"])] = float(r["cache_hit_rate"])
assert n == 3 * 10 * RANKS * ITERS, n
for s in (2, 4, 8):
    assert rate[("hot", f"{s}:static")] > rate[("hot", f"{s}:lru")], (s, rate)
print(f"{n} rank-iterations on uniform, hot and zipf traces: hits and misses as simulated;",
      "hot, static against lru:", [(rate[("hot", f"{s}:static")], rate[("hot", f"{s}:lru")])
                                    for s in (2, 4, 8)])
PY
# the report draws layer time against cache size (the expert_cache figure) from the traces' run
if command -v gnuplot >/dev/null; then
    "$BUILD/reports/moeperf-report" "$TMP/traces" --md "$TMP/r.md" >/dev/null || fail "moeperf-report exit $?"
    grep -qF "![Layer latency vs expert cache size](r_plots/expert_cache.svg)" "$TMP/r.md" &&
        grep -q "<svg" "$TMP/r_plots/expert_cache.svg" || fail "the report has no expert_cache figure"
fi
# moeperf-ffn keeps the same cache: at batch 512 every local expert of a rank is active in every
# iteration, in expert order, so 16 slots hit every access, lru and lfu below 16 none, static its
# SLOTS of 16; all ranks fetch their misses' bytes, each an expert's
mpi 2 "$BIN/moeperf-ffn" --hidden 64 --ffn 64 --experts 32 --topk 4 --shared 1 --batch 512 --iters 3 \
    --warmup 2 --quiet --routing uniform,hot:4:15 --expert-cache off,16,8,4:lfu,4:static \
    --out "$TMP/ffn" || fail "moeperf-ffn --expert-cache exit $?"
python3 - "$TMP/ffn/ffn.csv" <<'PY' || fail "moeperf-ffn's cache counts are not the policies'"
import csv, sys
per = (64 * 2 * 64 + 64 * 64) * 4  # one expert's fp32 weights on the cpu backend
n = 0
for r in csv.DictReader(open(sys.argv[1])):
    c = r["expert_cache"]
    if c == "off":
        assert r["cache_hit_rate"] == "" and float(r["fetch_bytes"]) == 0, r
        continue
    slots, policy = int(c.split(":")[0]), c.split(":")[1]
    want = slots / 16 if policy == "static" else (1.0 if slots == 16 else 0.0)
    assert abs(float(r["cache_hit_rate"]) - want) < 1e-9, (r["routing"], c, r["cache_hit_rate"], want)
    assert float(r["fetch_bytes"]) == 2 * 16 * (1 - want) * per, (r["routing"], c, r["fetch_bytes"])
    n += 1
assert n == 8, n
print(f"moeperf-ffn: {n} cached points, hit rates and bytes as the policies predict")
PY
# the model runs the same per-rank code (moeperf-ffn's --backend model): every point's hits and
# bytes are the measured run's, and on cpu-host (no copy engine) each fetch of an expert's bytes
# at pcie_bw is exposed whole, so ffn_us is the uncached point's plus fetch_us
"$BIN/moeperf-ffn" --backend model --comm model --cluster cpu-host --world 2 --hidden 64 --ffn 64 \
    --experts 32 --topk 4 --shared 1 --batch 512 --iters 3 --warmup 2 --quiet \
    --routing uniform,hot:4:15 --expert-cache off,16,8,4:lfu,4:static --out "$TMP/ffn_model" ||
    fail "moeperf-ffn --backend model --expert-cache exit $?"
python3 - "$TMP/ffn/ffn.csv" "$TMP/ffn_model/ffn.csv" <<'PY' || fail "moeperf-ffn's model counts its cache otherwise"
import csv, sys
measured, model = (list(csv.DictReader(open(f))) for f in sys.argv[1:3])
assert len(model) == len(measured) == 10, (len(model), len(measured))
off = {r["routing"]: float(r["ffn_us"]) for r in model if r["expert_cache"] == "off"}
per = (64 * 2 * 64 + 64 * 64) * 4
for a, b in zip(measured, model):
    assert (a["routing"], a["expert_cache"]) == (b["routing"], b["expert_cache"]), (a, b)
    for k in ("cache_hit_rate", "fetch_bytes"):
        assert a[k] == b[k], (b["routing"], b["expert_cache"], k, a[k], b[k])
    fetches = float(b["fetch_bytes"]) / per  # both ranks', one iteration's
    near = lambda x, y: abs(x - y) <= 1e-5 * abs(y)  # the CSV's 6 significant digits
    assert near(float(b["fetch_us"]), fetches / 2 * per / 10e9 * 1e6), b
    assert near(float(b["ffn_us"]), off[b["routing"]] + float(b["fetch_us"])), b
print("moeperf-ffn on the model: the measured hits and bytes, every fetch exposed at pcie_bw")
PY
# --resume keeps the cached points: nothing is measured again
mpi 2 "$BIN/moeperf-layer" $W --routing uniform --expert-cache 4:lru --resume --out "$TMP/run" \
    >"$TMP/resume.out" || fail "--resume exit $?"
[ "$(rows "$TMP/run/layer.csv")" -eq 32 ] || fail "--resume wrote $(rows "$TMP/run/layer.csv") rows, expected 32"
echo PASS
