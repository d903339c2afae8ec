#!/usr/bin/env bash
# prefill.sh - the prefill step on the model (docs/planning.md, "A prefill step"): moeperf-layer
# --phase prefill writes the step's parts (adding up as in decode), its prompt tokens/s per GPU
# (batch · seq over the step over the GPUs) and a first token per prompt; its attention grows with
# the prompt, a chunked prompt reads the earlier pieces back, and a prefill pass at a decode
# step's tokens costs more than that decode step (every token runs the whole model, and the head
# only the prompts' last ones).
. "$(dirname "$0")/lib.sh"

# DeepSeek-V3 on 16 H100s (2 nodes) as EP16, 2,048 tokens per GPU, node-forwarding dispatch
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 16 --model deepseek-v3 \
    --layout tp1ep16 --tokens-per-rank 2048 --context 512,2048 --phase prefill --chunk 0,512 \
    --dedup node --weight-dtype fp8 --dispatch-dtype fp8 --micro-batches 2 --iters 2 --quiet \
    --out "$TMP/pf" || fail "moeperf-layer --phase prefill exit $?"
"$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --world 16 --model deepseek-v3 \
    --layout tp1ep16 --tokens-per-rank 2048 --context 2048 --dedup node --weight-dtype fp8 \
    --dispatch-dtype fp8 --micro-batches 2 --iters 2 --quiet --out "$TMP/dec" 2>"$TMP/dec.err" ||
    fail "moeperf-layer decode exit $?"
python3 - "$TMP/pf" "$TMP/dec" <<'PY' || fail "the prefill step's columns do not hold"
import csv, sys
rows = list(csv.DictReader(l for l in open(f"{sys.argv[1]}/layer.csv") if not l.startswith("#")))
dec = list(csv.DictReader(l for l in open(f"{sys.argv[2]}/layer.csv") if not l.startswith("#")))
assert len(rows) == 4 and len(dec) == 1, (len(rows), len(dec))
parts = ("attn", "dense", "head", "misc", "host", "moe")
pt = {}
for r in rows:
    assert r["phase"] == "prefill", r["phase"]
    v = {k: float(r[k + "_us"]) for k in parts + ("overlap", "step")}
    assert all(x >= 0 for x in v.values()) and v["attn"] > 0, v
    assert abs(sum(v[k] for k in parts) - v["overlap"] - v["step"]) <= 1e-5 * v["step"], v
    tokens = int(r["batch"]) * int(r["seq"])
    inp, out = float(r["input_tok_s_gpu"]), float(r["tok_s_gpu"])
    assert abs(inp - tokens / (v["step"] * 1e-6) / 16) <= 1e-4 * inp, (inp, v["step"])
    assert abs(out - inp / int(r["context"])) <= 1e-4 * out, (out, inp)  # one token per prompt
    pt[(int(r["context"]), int(r["chunk"]))] = v
# the causal core grows with the prompt; chunks read the earlier pieces' latent back and
# up-project it again; whole prompts of 512 are not split by chunks of 512
assert pt[(2048, 0)]["attn"] > pt[(512, 0)]["attn"], pt
assert pt[(2048, 512)]["attn"] > pt[(2048, 0)]["attn"], pt
assert abs(pt[(512, 512)]["attn"] - pt[(512, 0)]["attn"]) <= 1e-9 * pt[(512, 0)]["attn"], pt
d = dec[0]
assert d["phase"] == "decode" and d["chunk"] == "0" and d["input_tok_s_gpu"] == "", d
# the same 2,048 tokens as a decode step run the LM head and sampling on every token, the prefill
# pass on each prompt's last one (its embedding and final norm stay per token)
assert float(d["head_us"]) > 3 * pt[(2048, 0)]["head"], (d["head_us"], pt[(2048, 0)]["head"])
print("prefill: step %.1f ms at prompts of 512, %.1f ms at 2048 (%.1f ms in pieces of 512)" %
      (pt[(512, 0)]["step"] / 1e3, pt[(2048, 0)]["step"] / 1e3, pt[(2048, 512)]["step"] / 1e3))
PY

# moeperf-plan for a workload: Qwen3-30B-A3B on H100s, 30 requests/s of 2000 in and 200 out; the
# pools' numbers hold to their formulas (docs/planning.md, "Serving a workload")
PLAN=$BUILD/planner/moeperf-plan
REPORT=$BUILD/reports/moeperf-report
serve="--model qwen3-30b-a3b --cluster h100-ndr --tp 1,2 --ep 1,2,4,8 --replicate 0 --weight-dtype fp8
    --dispatch-dtype fp8 --batch 16:256:x2 --prefill-tokens 2048,8192 --chunk 0,1024 --quiet"
# shellcheck disable=SC2086
"$PLAN" $serve --isl 2000 --osl 200 --rate 30 --slo-ttft-ms 2000 --slo-token-ms 50 \
    --gpu-hour-price 2 --out "$TMP/serve" >"$TMP/serve.out" || fail "moeperf-plan --isl exit $?"
python3 - "$TMP/serve/plan.json" <<'PY' || fail "the serving answer does not hold"
import json, math, sys
j = json.load(open(sys.argv[1]))
w, s = j["question"]["workload"], j["answers"][0]["serving"]
isl, osl, rate, slo = w["isl"], w["osl"], w["rate_rps"], w["slo_ttft_ms"]
assert (isl, osl, rate, slo) == (2000, 200, 30, 2000), w
assert j["question"]["context_tokens"] == isl + osl
assert j["question"]["throughput_tokens_per_s"] == rate * osl
p, d, kv, co = s["prefill"], s["decode"], s["kv_transfer"], s["colocated"]
assert p["found"] and d["found"], s
def md1(rho, sv):  # Pollaczek-Khinchine, deterministic service
    return math.inf if rho >= 1 else rho * sv / (2 * (1 - rho))
sp = p["pass_ms"] / 1e3 * isl / (p["tokens_per_gpu"] * p["ep"])
rho = rate * sp / p["instances"]
assert abs(rho - p["utilization"]) <= 1e-9, (rho, p["utilization"])
assert abs(md1(rho, sp) * 1e3 - p["queue_ms"]) <= 1e-6 * max(1, p["queue_ms"]), p
passes = math.ceil(isl / (p["chunk"] if 0 < p["chunk"] < isl else isl))
assert p["passes"] == passes, p
ttft = p["queue_ms"] + passes * p["pass_ms"] + kv["ms"]
assert abs(ttft - p["ttft_ms"]) <= 1e-6 * ttft and ttft <= slo, (ttft, p["ttft_ms"])
# the fewest instances: one fewer misses the SLO or overflows the queue
n = p["instances"] - 1
assert n == 0 or md1(rate * sp / n, sp) * 1e3 + passes * p["pass_ms"] + kv["ms"] > slo, p
assert p["gpus"] == p["instances"] * p["tp"] * p["ep"], p
assert abs(p["input_tok_s_gpu"] - p["tokens_per_gpu"] / (p["pass_ms"] / 1e3) / p["tp"]) <= 1e-6 * p["input_tok_s_gpu"], p
# the KV cache of one request: 2000 tokens, 48 layers, 4 KV heads of 2 x 128, bf16
assert abs(kv["mb_per_request"] - 2000 * 48 * 4 * 256 * 2 / 1e6) <= 1e-9, kv
assert abs(kv["gb_per_s"] - kv["mb_per_request"] / 1e3 * rate) <= 1e-9, kv
assert d["gpus"] == d["replicas"] * d["tp"] * d["ep"] and d["tpot_ms"] <= 50, d
assert d["context"] == isl + osl, d
disagg = p["gpus"] + d["gpus"]
if s["choice"] == "disaggregated":
    assert s["gpus"] == disagg and (not co["found"] or co["gpus"] >= disagg), s
    assert s["ttft_ms"] == p["ttft_ms"] and s["tpot_ms"] == d["tpot_ms"], s
else:
    assert s["choice"] == "colocated" and s["gpus"] == co["gpus"] < disagg, s
if co["found"]:
    assert co["ttft_ms"] <= slo and co["tpot_ms"] <= 50 and co["utilization"] < 1, co
assert abs(s["output_tok_s_gpu"] - rate * osl / s["gpus"]) <= 1e-9, s
assert abs(s["usd_per_mtok"] - 2 / 3600 / s["output_tok_s_gpu"] * 1e6) <= 1e-9, s
# the split: the same total length at other ratios; the decode pool grows with the output
sp_ = s["split"]
assert len(sp_) == 5 and all(x["isl"] + x["osl"] == isl + osl for x in sp_), sp_
dec = [x["decode_gpus"] for x in sp_]
assert dec == sorted(dec, reverse=True) and dec[0] > dec[-1], dec
print(f"serving: {s['choice']}, {s['gpus']} GPUs (prefill {p['gpus']} as {p['instances']} x "
      f"{p['layout']} at {p['tokens_per_gpu']} tokens, decode {d['gpus']}), TTFT "
      f"{s['ttft_ms']:.1f} ms, p99 token {s['tpot_ms']:.2f} ms; split {dec}")
PY
"$REPORT" "$TMP/serve" --out "$TMP/serve.html" --md "$TMP/serve.md" >/dev/null ||
    fail "moeperf-report on the serving plan exit $?"
grep -q "^### Serving the workload, routing uniform" "$TMP/serve.md" || fail "no serving section"
grep -q "^| prefill | " "$TMP/serve.md" && grep -q "^| decode | " "$TMP/serve.md" ||
    fail "the report has no row per pool"
grep -q "^### How the P:D split moves with the input/output ratio" "$TMP/serve.md" ||
    fail "the report has no split figure"
[ "$(grep -c '<title>prefill GPUs</title>' "$TMP/serve.html")" -eq 5 ] ||
    fail "the split figure has $(grep -c '<title>prefill GPUs</title>' "$TMP/serve.html") prefill bars, not 5"

# a mix of request lengths (--lengths): the decode context is the KV length averaged over the
# output tokens, the prefill wait the M/G/1 mean over the classes' service times
printf '# two classes\nisl,osl,weight\n1000,100,3\n4000,300,1\n' >"$TMP/lengths.csv"
# shellcheck disable=SC2086
"$PLAN" $serve --lengths "$TMP/lengths.csv" --rate 30 --slo-ttft-ms 2000 --slo-token-ms 50 \
    --out "$TMP/mix" >"$TMP/mix.out" || fail "moeperf-plan --lengths exit $?"
python3 - "$TMP/mix/plan.json" <<'PY' || fail "the mixed workload's answer does not hold"
import json, math, sys
j = json.load(open(sys.argv[1]))
q, s = j["question"], j["answers"][0]["serving"]
w = q["workload"]
cls = [(1000, 100, 0.75), (4000, 300, 0.25)]
ei = sum(p * i for i, o, p in cls); eo = sum(p * o for i, o, p in cls)
ei2 = sum(p * i * i for i, o, p in cls)
assert (w["isl"], w["osl"], w["isl_max"], w["classes"]) == (ei, eo, 4000, 2), w
ctx = sum(p * o * (i + o) for i, o, p in cls) / sum(p * o for i, o, p in cls)
assert q["context_tokens"] == round(ctx) == 2700 and q["throughput_tokens_per_s"] == 30 * eo, q
p, kv = s["prefill"], s["kv_transfer"]
assert p["found"], s
per = p["pass_ms"] / 1e3 / (p["tokens_per_gpu"] * p["ep"])
m1, m2 = per * ei, per * per * ei2
lam = 30 / p["instances"]
wait = lam * m2 / (2 * (1 - lam * m1)) * 1e3
assert abs(wait - p["queue_ms"]) <= 1e-6 * max(1, wait) and abs(lam * m1 - p["utilization"]) <= 1e-9, p
piece = lambda i: p["chunk"] if 0 < p["chunk"] < i else i
passes = sum(pp * math.ceil(i / piece(i)) for i, o, pp in cls)
assert abs(p["passes"] - passes) <= 1e-12, p
assert abs(p["ttft_ms"] - (wait + passes * p["pass_ms"] + kv["ms"])) <= 1e-6 * p["ttft_ms"], p
lam1 = 30 / (p["instances"] - 1) if p["instances"] > 1 else None
assert lam1 is None or lam1 * m1 >= 1 or \
    lam1 * m2 / (2 * (1 - lam1 * m1)) * 1e3 + passes * p["pass_ms"] + kv["ms"] > 2000, p
assert abs(kv["mb_per_request"] - ei * 48 * 4 * 256 * 2 / 1e6) <= 1e-9, kv
assert abs(s["output_tok_s_gpu"] - 30 * eo / s["gpus"]) <= 1e-9, s
print(f"mix: {s['choice']}, {s['gpus']} GPUs, TTFT {s['ttft_ms']:.1f} ms (queue {p['queue_ms']:.1f} "
      f"ms, M/G/1), context {q['context_tokens']}")
PY
printf 'isl,osl\n1000,100\n2000,-5\n' >"$TMP/bad-lengths.csv"
refuse_out() { # exit 2 naming $1, nothing written
    local want=$1 rc=0
    shift
    # shellcheck disable=SC2086
    "$PLAN" $serve "$@" --out "$TMP/refused" >/dev/null 2>"$TMP/err" || rc=$?
    [ "$rc" -eq 2 ] && grep -q -- "$want" "$TMP/err" && [ ! -e "$TMP/refused" ] ||
        fail "$* : exit $rc, $(cat "$TMP/err")"
}
refuse_out "bad-lengths.csv line 3, column osl: '-5'" --lengths "$TMP/bad-lengths.csv" --rate 1
printf 'prompt,osl\n1,1\n' >"$TMP/nohead.csv"
refuse_out "the header names no isl column" --lengths "$TMP/nohead.csv" --rate 1
refuse_out "--lengths and --isl" --lengths "$TMP/lengths.csv" --isl 10 --rate 1

# a spoiled serving answer: moeperf-report refuses it naming the member, and writes nothing
python3 - "$TMP/serve" "$TMP" <<'PY'
import json, shutil, sys
src, tmp = sys.argv[1], sys.argv[2]
def spoiled(name, fn):
    shutil.copytree(src, f"{tmp}/{name}")
    j = json.load(open(f"{src}/plan.json"))
    fn(j["answers"][0]["serving"])
    json.dump(j, open(f"{tmp}/{name}/plan.json", "w"))
spoiled("split-word", lambda s: s["split"][1].__setitem__("isl", "x"))
spoiled("pool-bare", lambda s: s["prefill"].pop("layout"))
spoiled("kv-negative", lambda s: s["kv_transfer"].__setitem__("ms", -1))
PY
for c in "split-word|answers\[0\].serving.split\[1\].isl is not a number" \
    "pool-bare|answers\[0\].serving.prefill.layout is missing" \
    "kv-negative|answers\[0\].serving.kv_transfer.ms is -1, not a number of at least 0"; do
    rc=0
    "$REPORT" "$TMP/${c%%|*}" --out "$TMP/spoiled.html" >/dev/null 2>"$TMP/err" || rc=$?
    [ "$rc" -eq 2 ] && grep -q "${c#*|}" "$TMP/err" && [ ! -e "$TMP/spoiled.html" ] ||
        fail "a spoiled serving answer (${c%%|*}): exit $rc, $(cat "$TMP/err")"
done

# no plan: a TTFT below one pass names the fastest pass; a rate beyond --max-gpus names the GPUs
# shellcheck disable=SC2086
"$PLAN" $serve --isl 2000 --osl 200 --rate 30 --slo-ttft-ms 1 --out "$TMP/fast" >"$TMP/fast.out" ||
    fail "a plan-less answer exit $?"
grep -q "answer: none: no prefill pass reaches the TTFT SLO of 1 ms: the fastest" "$TMP/fast.out" ||
    fail "no reason for the TTFT SLO: $(grep answer: "$TMP/fast.out")"
python3 -c "
import json; s = json.load(open('$TMP/fast/plan.json'))['answers'][0]['serving']
assert s['choice'] == 'none' and s['gpus'] == 0 and 'TTFT SLO' in s['why'], s" ||
    fail "plan.json's plan-less answer"
# shellcheck disable=SC2086
"$PLAN" $serve --isl 2000 --osl 200 --rate 100000 --max-gpus 16 --out "$TMP/big" >"$TMP/big.out" ||
    fail "a plan-less answer exit $?"
grep -q "answer: none: the prefill pool needs [0-9]* GPUs at the least .*more than --max-gpus 16" \
    "$TMP/big.out" || fail "no shortfall for the rate: $(grep answer: "$TMP/big.out")"
"$REPORT" "$TMP/fast" --md "$TMP/fast.md" --out "$TMP/fast.html" >/dev/null || fail "report exit $?"
grep -q "No pool serves it: no prefill pass reaches the TTFT SLO" "$TMP/fast.md" ||
    fail "the report does not say why no pool serves it"
# refused, naming the flag, nothing written
refuse() {
    local want=$1 rc=0
    shift
    # shellcheck disable=SC2086
    "$PLAN" $serve "$@" --out "$TMP/refused" >/dev/null 2>"$TMP/err" || rc=$?
    [ "$rc" -eq 2 ] && grep -q -- "$want" "$TMP/err" && [ ! -e "$TMP/refused" ] ||
        fail "$* : exit $rc, $(cat "$TMP/err")"
}
refuse "--isl" --isl 0 --osl 10 --rate 1
refuse "--osl" --osl 0 --isl 10 --rate 1
refuse "--isl: a serving workload needs --rate" --isl 10 --osl 10
refuse "--context: a serving workload sets it" --isl 10 --osl 10 --rate 1 --context 100
refuse "--rate describes a serving workload" --rate 3
echo "serving: refusals and plan-less answers hold"
echo PASS
