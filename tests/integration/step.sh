#!/usr/bin/env bash
# step.sh - the whole decode step on the model (docs/planning.md, "What a step includes"): the
# step's parts add up (less what two micro-batches hide) in moeperf-layer's layer.csv and in
# moeperf-plan's plan.csv and plan.json, two micro-batches win at 256 tokens per GPU and lose at 2,
# the KV cache read grows with --context, tokens/s per GPU and the cost per million tokens follow
# their formulas, seed-k3 is planned on H100s, and moeperf-report shows the parts (a table per
# model curve, a finding, and each plan's stacked bar).
. "$(dirname "$0")/lib.sh"
PLAN=$BUILD/planner/moeperf-plan
REPORT=$BUILD/reports/moeperf-report

# SGLang's published decode: DeepSeek-V3 on 72 H100s, 256 tokens per GPU, KV 2000, fp8, one and two
# micro-batches, and the same at 2 tokens per GPU; and two contexts
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 72 --model deepseek-v3 \
    --layout tp1ep72 --tokens-per-rank 2,256 --context 2000,8000 --weight-dtype fp8 \
    --dispatch-dtype fp8 --micro-batches 1,2 --iters 4 --quiet --out "$TMP/ep72" ||
    fail "moeperf-layer on the model exit $?"
python3 - "$TMP/ep72" <<'PY' || fail "the step's columns do not hold"
import csv, sys
rows = list(csv.DictReader(open(f"{sys.argv[1]}/layer.csv")))
assert len(rows) == 8, len(rows)
key = lambda r: (r["tokens_per_rank"], r["batch"], r["context"], r["micro_batches"])
layers_of = {}  # each point's per-iteration layer times (one micro-batch's)
for r in csv.DictReader(open(f"{sys.argv[1]}/layer_samples.csv")):
    layers_of.setdefault((r["batch"], r["context"], r["micro_batches"]), []).append(float(r["layer_us"]))
step = {}
parts = ("attn", "dense", "head", "misc", "host", "moe")
for r in rows:
    mb, ctx, tpr = int(r["micro_batches"]), int(r["context"]), int(r["tokens_per_rank"])
    v = {k: float(r[k + "_us"]) for k in parts + ("overlap", "step")}
    assert all(x >= 0 for x in v.values()) and v["attn"] > 0 and v["head"] > 0, r
    # the parts add up to the step, less what two micro-batches hide (0 with one)
    assert abs(sum(v[k] for k in parts) - v["overlap"] - v["step"]) <= 1e-5 * v["step"], v
    assert (v["overlap"] == 0) == (mb == 1), (mb, v["overlap"])
    # the MoE layers: layers · micro-batches · one micro-batch's layer time (58 MoE layers) in the
    # iteration whose step is the median
    its = layers_of[(r["batch"], r["context"], r["micro_batches"])]
    assert any(abs(v["moe"] - 58 * mb * x) <= 1e-5 * v["moe"] for x in its), (v, its)
    # tokens/s per GPU: the batch over the step over 72 GPUs
    tok = float(r["tok_s_gpu"])
    assert abs(tok - int(r["batch"]) / (v["step"] / 1e6) / 72) <= 1e-4 * tok, (tok, r["batch"], v)
    assert float(r["step_p99_us"]) >= v["step"], r
    step[(tpr, ctx, mb)] = v
for ctx in (2000, 8000):
    a, b = step[(256, ctx, 1)]["step"], step[(256, ctx, 2)]["step"]
    assert b < a, ("two micro-batches do not win at 256 tokens per GPU", ctx, a, b)
    a, b = step[(2, ctx, 1)]["step"], step[(2, ctx, 2)]["step"]
    assert b >= a, ("two micro-batches win at 2 tokens per GPU", ctx, a, b)
# the MoE layers do not read the KV cache: a longer context moves attention, not their times
for tpr, batch in ((2, "144"), (256, "18432")):
    for mb in (1, 2):
        s2, s8 = step[(tpr, 2000, mb)], step[(tpr, 8000, mb)]
        assert s8["attn"] > s2["attn"], (tpr, mb, s2, s8)
        assert layers_of[(batch, "2000", str(mb))] == layers_of[(batch, "8000", str(mb))], (tpr, mb)
v = step[(256, 2000, 2)]
print(f"EP72 at 256 tokens per GPU, KV 2000: {step[(256, 2000, 1)]['step'] / 1e3:.1f} ms with one "
      f"batch, {v['step'] / 1e3:.1f} ms with two micro-batches (the published 91.9 ms: "
      f"×{v['step'] / 91.9e3:.2f}); at 2 tokens: {step[(2, 2000, 1)]['step'] / 1e3:.1f} against "
      f"{step[(2, 2000, 2)]['step'] / 1e3:.1f} ms")
PY
"$REPORT" "$TMP/ep72" --out "$TMP/ep72.html" --md "$TMP/ep72.md" >/dev/null || fail "report exit $?"
grep -q '^## Decode step (scope: the whole step, every layer; model runs)' "$TMP/ep72.md" ||
    fail "the report has no step table"
grep -q '^- \*\*whole step\*\*: .* its fastest-growing part is the MoE layers' "$TMP/ep72.md" ||
    fail "the report does not say which part grows fastest: $(grep -i 'whole step' "$TMP/ep72.md")"
grep -q '^## Layer latency (scope: one MoE layer)' "$TMP/ep72.md" ||
    fail "the layer table does not say its scope"

# the planner on the whole step: parts, tokens/s per GPU and USD per million tokens
"$PLAN" --model deepseek-v3 --cluster h100-ndr --routing uniform --tp 1 --ep 16,32 --replicate 0 \
    --batch 64,256 --weight-dtype fp8 --dispatch-dtype fp8 --micro-batches 1,2 --context 2000 \
    --slo-token-ms 100 --throughput 100000 --gpu-hour-price 2.5 --iters 3 --out "$TMP/plan" \
    >"$TMP/plan.out" || fail "moeperf-plan exit $?"
grep -q '^# token_ms: the whole decode step per output token at 2000 tokens of context' "$TMP/plan.out" ||
    fail "the console does not say the token time is the whole step"
python3 - "$TMP/plan" <<'PY' || fail "plan.csv and plan.json do not carry the step"
import csv, json, math, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/plan.csv")))
assert len(rows) == 8, len(rows)
for r in rows:
    parts = sum(float(r[k + "_us"]) for k in ("attn", "dense", "head", "misc", "host", "moe"))
    step = float(r["token_ms"]) * 1e3
    assert abs(parts - float(r["overlap_us"]) - step) <= 1e-5 * step, (parts, r["overlap_us"], step)
    tp, ep = int(r["tp"]), int(r["ep"])
    tok = float(r["replica_tokens_per_s"]) / (tp * ep)
    assert abs(float(r["tok_s_gpu"]) - tok) <= 1e-5 * tok, r
    assert abs(float(r["usd_per_mtok"]) - 2.5 / 3600 / tok * 1e6) <= 1e-5 * float(r["usd_per_mtok"]), r
    assert r["context"] == "2000" and r["micro_batches"] in ("1", "2"), r
j = json.load(open(f"{d}/plan.json"))
q = j["question"]
assert q["token_scope"] == "step" and q["gpu_hour_price_usd"] == 2.5, q
assert q["constraints"]["micro_batches"] == [1, 2], q["constraints"]
assert abs(q["model"]["params_derived"] / 671e9 - 1) < 0.03, q["model"]
a = j["answers"][0]
assert a["found"] and a["token_scope"] == "step" and a["context"] == 2000, a
p = a["step_parts_ms"]
assert set(p) == {"attention", "dense", "expert_compute", "dispatch_combine", "small_kernels",
                  "head", "host"}, p
assert all(v >= 0 for v in p.values()) and abs(sum(p.values()) - a["token_p50_ms"]) <= 1e-6 * a["token_p50_ms"], p
assert abs(a["usd_per_mtok"] - 2.5 / 3600 / a["tok_s_gpu"] * 1e6) <= 1e-6 * a["usd_per_mtok"], a
for alt in a["alternatives"]:
    assert alt["usd_per_mtok"] > 0 and alt["tok_s_gpu"] > 0, alt
for s in a["sensitivity"]:
    assert not s["found"] or s["usd_per_mtok"] > 0, s
print(f"plan: {a['layout']} at batch {a['batch']}, {a['micro_batches']} micro-batch(es): "
      f"{a['token_p50_ms']:.2f} ms per token, {a['tok_s_gpu']:.0f} tokens/s per GPU, "
      f"USD {a['usd_per_mtok']:.3f} per million; parts {p}")
PY
"$REPORT" "$TMP/plan" --out "$TMP/plan.html" --md "$TMP/plan.md" >/dev/null || fail "report exit $?"
grep -q '^### What a step of each plan spends its time on (scope: the whole step, ms)' "$TMP/plan.md" ||
    fail "the report has no step bar for the plan"
grep -q "USD [0-9.]* per million output tokens" "$TMP/plan.md" || fail "the report gives no cost"
# the page's bar: one rect per part (7) and one per key entry
[ "$(grep -c '<rect ' "$TMP/plan.html")" -eq 14 ] ||
    fail "the plan's stacked bar has $(grep -c '<rect ' "$TMP/plan.html") rects, not 7 parts and 7 keys"
# without a price there is no cost
"$PLAN" --model deepseek-v3 --cluster h100-ndr --routing uniform --tp 1 --ep 16 --replicate 0 \
    --batch 64 --weight-dtype fp8 --iters 2 --out "$TMP/free" >/dev/null || fail "moeperf-plan exit $?"
python3 -c "
import json, sys
a = json.load(open('$TMP/free/plan.json'))['answers'][0]
assert a['usd_per_mtok'] is None, a['usd_per_mtok']" || fail "a plan without a price has a cost"

# the seed's own model on H100s: planned (its derived 200B parameters fit)
"$PLAN" --model seed-k3 --cluster h100-ndr --quiet >"$TMP/seed.out" || fail "seed-k3 plan exit $?"
grep -q '^cheapest plan: ' "$TMP/seed.out" || fail "seed-k3 finds no plan: $(grep -i plan "$TMP/seed.out")"
grep '^cheapest plan: ' "$TMP/seed.out"
echo "PASS"
