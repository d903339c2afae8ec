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
echo PASS
