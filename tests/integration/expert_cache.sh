#!/usr/bin/env bash
# expert_cache.sh - moeperf-layer --expert-cache on the cpu backend, 2 ranks, 32 experts (16 a
# rank), top-4, batch 512: every expert has rows in every iteration (the coldest, under hot:4:15,
# about 23), so the accesses are a cyclic scan of a rank's 16 experts in expert order and the
# policies' counts are known exactly: a cache of all 16 hits every access after the warm-up; lru and lfu below 16 slots miss every access
# (the scan evicts each expert before its next use); static keeps its SLOTS experts (the hottest:
# 0-3 under hot:4:15 on rank 0) and fetches the rest, so it beats lru; every fetch moves one
# expert's bytes, and --check passes with every policy and slot count, in bf16 and fp8 weights.
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
# --resume keeps the cached points: nothing is measured again
mpi 2 "$BIN/moeperf-layer" $W --routing uniform --expert-cache 4:lru --resume --out "$TMP/run" \
    >"$TMP/resume.out" || fail "--resume exit $?"
[ "$(rows "$TMP/run/layer.csv")" -eq 32 ] || fail "--resume wrote $(rows "$TMP/run/layer.csv") rows, expected 32"
echo PASS
