#!/usr/bin/env bash
# model_parity.sh - moeperf-layer's, moeperf-a2a's and moeperf-ffn's measured (cpu+mpi) and
# modelled runs take the same flags, but for a documented short list the model refuses naming the
# flag; they write the same CSV headers; the model's dispatches (padded and --dedup rank too, bf16
# and --dispatch-dtype fp8 rows) move (per phase and link class), keep and drop exactly the rows a
# measured run does; moeperf-a2a's modelled moe pattern sends the measured run's bytes, and
# moeperf-ffn's modelled points count the measured run's rows, experts, FLOPs and weight bytes.
. "$(dirname "$0")/lib.sh"
LAYER=$BIN/moeperf-layer
A2A=$BIN/moeperf-a2a
FFN=$BIN/moeperf-ffn

# The flags a measured run takes and a modelled one refuses (exit 2, the message naming the
# flag), per binary: the same lists as mp_session_refuse_unsupported (core/run/session.c), the
# binaries' --graph checks and docs/planning.md.
LAYER_MODEL_REFUSES="--check --graph --inject-delay-us --max-memory"
A2A_MODEL_REFUSES="--inject-delay-us"
FFN_MODEL_REFUSES="--graph --max-memory"
# --graph needs --backend cuda --comm nccl: the measured cpu run refuses it too.
CPU_REFUSES="--graph"

base="--hidden 32 --ffn 16 --experts 4 --topk 2 --batch 8 --iters 2 --warmup 0 --quiet"
model="--backend model --comm model --cluster cpu-host --world 2"

# sample FLAG: the arguments that exercise FLAG in a 2-rank run (empty for a plain flag); exit 1
# for a flag this test does not know, so a new flag in --help must be placed here.
sample() {
    case $1 in
    --model) echo "--model mixtral-8x7b" ;;
    --pattern) echo "--pattern uniform" ;;
    --bytes) echo "--bytes 1K,48K" ;;
    --experts) echo "--experts 6" ;;
    --topk) echo "--topk 3" ;;
    --shared) echo "--shared 1" ;;
    --hidden) echo "--hidden 48" ;;
    --ffn) echo "--ffn 24" ;;
    --layers) echo "--layers 3" ;;
    --batch) echo "--batch 4,12" ;;
    --tokens-per-rank) echo "--tokens-per-rank 2,6" ;; # the runs leave the base's --batch out
    --seq) echo "--seq 2" ;;
    --context) echo "--context 4096,1024" ;;
    --micro-batches) echo "--micro-batches 1" ;; # 2: the model only (bad_input.sh)
    --phase) echo "--phase decode" ;;            # prefill: the model only (bad_input.sh)
    --chunk) echo "--chunk 0" ;;                 # > 0: prefill only (bad_input.sh)
    --layout) echo "--layout tp2ep1,tp1ep2" ;;
    --routing) echo "--routing zipf:1.2,hot:1:40" ;;
    --group-limit) echo "--group-limit off,2:1" ;;
    --placement) echo "--placement round-robin,eplb:2" ;;
    --overlap) # moeperf-a2a overlaps --dedup node's two phases alone
        if [ "$(basename "$tool")" = moeperf-a2a ]; then echo "--overlap 1,2 --dedup node"; else
            echo "--overlap 1,2"; fi ;;
    --dispatch) echo "--dispatch dynamic,padded,padded:0.5" ;;
    --dedup) echo "--dedup pair,rank,node" ;;
    --dispatch-dtype) echo "--dispatch-dtype bf16,fp8" ;;
    --weight-dtype) echo "--weight-dtype bf16,fp8" ;;
    --expert-cache) echo "--expert-cache off,2:lfu" ;;
    --gemm) echo "--gemm loop" ;;
    --graph) # moeperf-layer's capture takes a dispatch without a host sync; the ffn's is the FFN's
        if [ "$(basename "$tool")" = moeperf-layer ]; then echo "--graph --dispatch padded"; else
            echo "--graph"; fi ;;
    --seed) echo "--seed 9" ;;
    --warmup) echo "--warmup 1" ;;
    --iters) echo "--iters 3" ;;
    --cpu-bind) echo "--cpu-bind none" ;;
    --cluster) echo "--cluster h100-ndr" ;;
    --world) echo "--world 2" ;;
    --out) echo "" ;; # every run below writes into --out
    --resume) echo "--resume" ;;
    --force) echo "--force" ;;
    --check) echo "--check" ;;
    --quiet) echo "--quiet" ;;
    --timeout) echo "--timeout 60" ;;
    --max-memory) echo "--max-memory 1G" ;;
    --inject-delay-us) echo "--inject-delay-us 5" ;;
    --straggle) echo "--straggle 1:50" ;;
    --flush-cache) echo "--flush-cache" ;;
    --no-flush-cache) echo "--no-flush-cache" ;;
    --rank-samples) echo "--rank-samples" ;;
    --min-busbw) echo "--min-busbw 0.000001" ;;
    --no-rank-samples) echo "--no-rank-samples" ;;
    -h | --help) echo "--help" ;;
    --version) echo "--version" ;;
    --backend | --comm) echo "" ;; # the two runs differ by these: they choose the side
    *) return 1 ;;
    esac
}

# check_flag TOOL REFUSES TBASE FLAG: FLAG's sample, run measured (2 ranks) and modelled: both
# take it, or the measured run refuses a cuda-only flag, or the model refuses it naming it
check_flag() {
    local tool=$1 refuses=$2 tbase=$3 f=$4 args mrc vrc
    args=$(sample "$f")
    tbase=$(base_for "$tbase" "$args")
    set +e
    # shellcheck disable=SC2086
    mpi 2 "$tool" $tbase $args --out "$TMP/m1" >/dev/null 2>"$TMP/m.err"
    mrc=$?
    # shellcheck disable=SC2086
    "$tool" $model $tbase $args --out "$TMP/v1" >/dev/null 2>"$TMP/v.err"
    vrc=$?
    set -e
    rm -rf "$TMP/m1" "$TMP/v1"
    case " $CPU_REFUSES " in
    *" $f "*) [ "$mrc" -eq 2 ] || fail "measured $f exited $mrc, expected 2 (a cuda-only flag)" ;;
    *) [ "$mrc" -eq 0 ] ||
        fail "measured $tool with $args exited $mrc: $(head -c 400 "$TMP/m.err")" ;;
    esac
    case " $refuses " in
    *" $f "*)
        [ "$vrc" -eq 2 ] ||
            fail "modelled $tool with $args exited $vrc, expected 2 (it refuses $f)"
        grep -q -- "$f" "$TMP/v.err" ||
            fail "the model's refusal of $f does not name it: $(cat "$TMP/v.err")"
        echo "model refuses $f: $(cat "$TMP/v.err")"
        ;;
    *)
        [ "$vrc" -eq 0 ] || fail "modelled $tool with $args exited $vrc, but the measured" \
            "one takes $f: $(head -c 400 "$TMP/v.err") (model it, or refuse it naming the" \
            "flag and add it to the refused list and docs/planning.md)"
        ;;
    esac
}

# options ARGS...: the option names ARGS set, a --no-X counted as X, --tokens-per-rank as --batch
# and --force as --resume (each pair is refused together), --placement as --layout (eplb:2 has no
# room on tp2ep1), one line each
options() {
    printf '%s\n' "$@" | grep -E '^--' |
        sed 's/^--no-/--/; s/^--tokens-per-rank$/--batch/; s/^--force$/--resume/;
             s/^--placement$/--layout/' | sort -u
}

# base_for TBASE ARGS: TBASE without its --batch where ARGS count tokens per rank instead
base_for() {
    case " $2 " in
    *" --tokens-per-rank "*) echo "$1" | sed 's/--batch [^ ]*//' ;;
    *) echo "$1" ;;
    esac
}

# parity TOOL REFUSES BASE: every flag TOOL's --help lists, negations included, is taken by a
# measured 2-rank run and a modelled one alike, but REFUSES, which the model refuses naming the
# flag. The flags both take run in groups (at most two lists, so a handful of points, and no
# option twice), each group one measured and one modelled run; a group either refuses is run again
# flag by flag, so the message names the flag. The refused flags, --help and --version run alone.
parity() {
    local tool=$1 refuses=$2 tbase=$3 f n=0 g args
    "$tool" --help >"$TMP/help.txt"
    flags=$(grep -oE '^  (-h, )?--[a-z-]+|--no-[a-z-]+ turns' "$TMP/help.txt" |
        grep -oE '\-\-?[a-z-]+' | grep -v '^--$' | sort -u)
    [ "$(echo "$flags" | wc -l)" -ge 20 ] ||
        fail "read only $(echo "$flags" | wc -l) flags from $tool --help"
    for f in $refuses; do
        echo "$flags" | grep -qx -- "$f" || fail "$f is on the refused list but not in --help"
    done
    local groups=() glists=() gopts=()
    for f in $flags; do
        args=$(sample "$f") ||
            fail "$f is in --help but not here: give it a sample and decide whether the model takes it"
        n=$((n + 1))
        case " $refuses $CPU_REFUSES -h --help --version " in
        *" $f "*) check_flag "$tool" "$refuses" "$tbase" "$f"; continue ;;
        esac
        local opts lists=0
        # shellcheck disable=SC2086
        opts=$(options $f $args)
        case $args in *,*) lists=1 ;; esac
        for g in "${!groups[@]}"; do
            [ $((glists[g] + lists)) -le 2 ] || continue
            [ -z "$(comm -12 <(echo "${gopts[$g]}") <(echo "$opts"))" ] || continue
            groups[g]="${groups[$g]} $f"
            glists[g]=$((glists[g] + lists))
            gopts[g]=$(printf '%s\n%s\n' "${gopts[$g]}" "$opts" | sort -u)
            continue 2
        done
        groups+=(" $f")
        glists+=("$lists")
        gopts+=("$opts")
    done
    for g in "${!groups[@]}"; do
        args=""
        for f in ${groups[$g]}; do args="$args $(sample "$f")"; done
        gbase=$(base_for "$tbase" "$args")
        set +e
        # shellcheck disable=SC2086
        mpi 2 "$tool" $gbase $args --out "$TMP/mg" >/dev/null 2>&1
        mrc=$?
        # shellcheck disable=SC2086
        "$tool" $model $gbase $args --out "$TMP/vg" >/dev/null 2>&1
        vrc=$?
        set -e
        rm -rf "$TMP/mg" "$TMP/vg"
        if [ "$mrc" -ne 0 ] || [ "$vrc" -ne 0 ]; then
            echo "group of${groups[$g]}: measured exit $mrc, modelled $vrc: flag by flag"
            for f in ${groups[$g]}; do check_flag "$tool" "$refuses" "$tbase" "$f"; done
        fi
    done
    echo "$(basename "$tool"): $n flags in ${#groups[@]} groups and the rest alone, both take" \
        "all but $refuses"
}
parity "$LAYER" "$LAYER_MODEL_REFUSES" "$base"
# the moe pattern in the base: --routing, --dedup and the rest act; --pattern uniform ends it
parity "$A2A" "$A2A_MODEL_REFUSES" "--pattern moe $base"
parity "$FFN" "$FFN_MODEL_REFUSES" "$base"

# the same columns, and the model's counts are the measured run's: rows, slot rows, bytes (per
# phase and link class too) and drops of the dynamic and padded dispatches, with and without a
# group limit, after two warm-up iterations, so the timed ones must route the same draws of the
# pool in both (the cpu-host profile has the cpu backend's 4-byte elements)
sweep="--hidden 32 --ffn 16 --experts 8 --topk 2 --shared 1 --layout tp1ep4,tp2ep2 --batch 16,40
    --routing zipf:1.2,hot:2:30 --group-limit off,2:1 --placement contiguous,eplb:4
    --dispatch dynamic,padded,padded:0.75 --dispatch-dtype bf16,fp8 --iters 3 --warmup 2 --seed 7
    --quiet --no-flush-cache"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $sweep --out "$TMP/measured" || fail "measured sweep exit $?"
# the measured ranks share one host, one node: the profile's node holds all four, so the bytes
# within and between nodes compare too
printf 'base=cpu-host\ngpus_per_node=4\n' >"$TMP/one-node.profile"
# shellcheck disable=SC2086
# shellcheck disable=SC2086
"$LAYER" --backend model --comm model --cluster "$TMP/one-node.profile" --world 4 $sweep \
    --out "$TMP/modelled" || fail "modelled sweep exit $?"
# and the same for --dedup rank, dynamic and padded (slots of a tight capacity too): the rows the
# experts run, the pairs dropped and the bytes on the wire, the metadata of each dispatched row
# included (node relays between nodes, which one host has not: tests/integration/dedup_nodes.sh
# compares it across emulated nodes)
dsweep="--hidden 32 --ffn 16 --experts 8 --topk 3 --shared 1 --layout tp1ep4,tp2ep2 --batch 16,40
    --routing zipf:1.2,hot:2:30 --placement contiguous,replicate-hot:2,eplb:4
    --dispatch dynamic,padded,padded:0.25 --dedup pair,rank --iters 3 --warmup 2 --seed 7 --quiet
    --no-flush-cache"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $dsweep --out "$TMP/dmeasured" || fail "measured --dedup sweep exit $?"
# shellcheck disable=SC2086
"$LAYER" --backend model --comm model --cluster "$TMP/one-node.profile" --world 4 $dsweep \
    --out "$TMP/dmodelled" || fail "modelled --dedup sweep exit $?"
# and pipelined (chunks of tokens): the rows and bytes of every chunk add up as measured
osweep="--hidden 32 --ffn 16 --experts 8 --topk 3 --shared 1 --layout tp1ep4,tp2ep2 --batch 16,40
    --routing zipf:1.2 --placement contiguous,eplb:4 --dedup rank,node --overlap 2,3
    --dispatch-dtype bf16,fp8 --weight-dtype bf16,fp8 --iters 3 --warmup 2 --seed 7 --quiet
    --no-flush-cache"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $osweep --out "$TMP/omeasured" || fail "measured pipelined --dedup sweep exit $?"
# shellcheck disable=SC2086
"$LAYER" --backend model --comm model --cluster "$TMP/one-node.profile" --world 4 $osweep \
    --out "$TMP/omodelled" || fail "modelled pipelined --dedup sweep exit $?"
# and an expert cache (docs/METRICS.md, "Expert cache"): every rank's hits, misses and fetched
# bytes in every iteration are the measured run's, small batches leaving experts without rows (the
# model's cache runs over its own count of each draw's rows per local expert: an independent
# simulation of the same draws)
csweep="--hidden 32 --ffn 16 --experts 16 --topk 2 --shared 1 --layout tp1ep4,tp2ep2 --batch 4,24
    --routing zipf:1.2,hot:2:30 --dispatch dynamic,padded --expert-cache 1,2:lfu,3:static,2:lru
    --iters 4 --warmup 2 --seed 7 --quiet --no-flush-cache"
# shellcheck disable=SC2086
mpi 4 "$LAYER" $csweep --out "$TMP/cmeasured" || fail "measured --expert-cache sweep exit $?"
# shellcheck disable=SC2086
"$LAYER" --backend model --comm model --cluster "$TMP/one-node.profile" --world 4 $csweep \
    --out "$TMP/cmodelled" || fail "modelled --expert-cache sweep exit $?"
python3 - "$TMP/cmeasured" "$TMP/cmodelled" <<'PY' || fail "the modelled cache's counts differ"
import csv, sys
key = ["layout", "routing", "dispatch", "expert_cache", "batch", "iter", "rank"]
def load(d):
    return {tuple(r[k] for k in key): r for r in csv.DictReader(open(f"{d}/layer_rank_samples.csv"))}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys() and len(a) == 2 * 2 * 2 * 4 * 2 * 4 * 4, (len(a), len(b))
bad, partial = 0, 0
for k in a:
    for c in ("cache_hits", "cache_misses", "fetch_bytes"):
        if a[k][c] != b[k][c]:
            bad += 1
            print(f"{k} {c}: measured {a[k][c]}, modelled {b[k][c]}", file=sys.stderr)
    partial += k[2] == "dynamic" and float(a[k]["cache_hits"]) + float(a[k]["cache_misses"]) < 4
assert partial > 0, "no rank-iteration left an expert without rows"
print(f"{len(a)} rank-iterations, {partial} with experts left unread: hits, misses and bytes "
      f"measured = modelled, {bad} differ")
sys.exit(1 if bad else 0)
PY
for f in layer.csv layer_ranks.csv layer_samples.csv layer_rank_samples.csv; do
    [ "$(head -1 "$TMP/measured/$f")" = "$(head -1 "$TMP/modelled/$f")" ] ||
        fail "$f: measured and modelled headers differ"
done
python3 - "$TMP/measured" "$TMP/modelled" "$TMP/dmeasured" "$TMP/dmodelled" "$TMP/omeasured" \
    "$TMP/omodelled" <<'PY' || fail "counts differ"
import csv, sys
key = ["layout", "routing", "group_limit", "placement", "overlap", "dispatch", "dedup",
       "dispatch_dtype", "weight_dtype", "batch"]
phase_bytes = ["dispatch_bytes_intranode", "dispatch_bytes_internode", "combine_bytes_intranode",
               "combine_bytes_internode"]
link_bytes = ["bytes_internode", "bytes_intranode"] + phase_bytes
checks = [("layer.csv", [], ["tokens_per_rank", "load_imbalance", "local_hit_rate", "bytes_rank_max",
                             "drop_rate"] + link_bytes),
          ("layer_ranks.csv", ["rank"], ["tokens", "rows", "ffn_rows", "bytes_sent"] + phase_bytes),
          ("layer_samples.csv", ["iter"], ["load_imbalance", "local_hit_rate", "bytes_rank_max",
                                           "drop_rate"] + link_bytes)]
def load(path, extra):
    return {tuple(r[k] for k in key + extra): r for r in csv.DictReader(open(path, newline=""))}
bad = cells = 0
for measured, modelled in (sys.argv[1:3], sys.argv[3:5], sys.argv[5:7]):
    for name, extra, cols in checks:
        a, b = load(f"{measured}/{name}", extra), load(f"{modelled}/{name}", extra)
        if a.keys() != b.keys():
            sys.exit(f"{name}: the measured and modelled runs wrote different points")
        for k in a:
            for c in cols:
                cells += 1
                if a[k][c] != b[k][c]:
                    bad += 1
                    print(f"{name} {k} {c}: measured {a[k][c]}, modelled {b[k][c]}",
                          file=sys.stderr)
print(f"{cells} count cells compared, {bad} differ")
ranked = [r for r in csv.DictReader(open(f"{sys.argv[3]}/layer.csv")) if r["dedup"] == "rank"]
if len(ranked) != 72:
    sys.exit(f"{len(ranked)} --dedup rank points measured, expected 72")
if not any(float(r["drop_rate"]) > 0 for r in ranked if r["dispatch"] == "padded:0.25"):
    sys.exit("no padded:0.25 --dedup rank point dropped a pair")
if any(float(r["drop_rate"]) > 0 for r in ranked if r["dispatch"] != "padded:0.25"):
    sys.exit("a lossless --dedup rank point dropped pairs")
# a tight capacity drops pairs (and the measured run drops the same); lossless padded drops none
mod = load(f"{sys.argv[2]}/layer.csv", [])
tight = [float(r["drop_rate"]) for k, r in mod.items() if k[key.index("dispatch")] == "padded:0.75"]
lossless = [float(r["drop_rate"]) for k, r in mod.items() if k[key.index("dispatch")] in ("padded", "dynamic")]
if not tight or min(tight) <= 0:
    sys.exit(f"padded:0.75 points with drop_rate 0: {tight}")
if any(lossless):
    sys.exit(f"lossless points with drops: {lossless}")
sys.exit(1 if bad else 0)
PY

# moeperf-a2a's moe pattern on the model sends the measured run's bytes (the same routing draws,
# placement and dispatch plan, per pair or deduplicated, in bf16 or fp8 rows); moeperf-ffn's
# modelled points run the measured run's rows and experts; both write the measured headers
asweep="--pattern moe --hidden 32 --experts 8 --topk 3 --layout tp1ep4,tp2ep2 --batch 16,40
    --routing zipf:1.2,hot:2:30 --group-limit off,2:1 --placement contiguous,eplb:4
    --dedup pair,rank,node --dispatch-dtype bf16,fp8 --iters 3 --warmup 2 --seed 7 --quiet"
fsweep="--hidden 32 --ffn 16 --experts 8 --topk 3 --shared 1 --layout tp1ep4,tp2ep2 --batch 16,40
    --routing zipf:1.2,hot:2:30 --placement contiguous,eplb:4 --weight-dtype bf16,fp8 --iters 2
    --warmup 0 --seed 7 --quiet --no-flush-cache"
onenode="--backend model --comm model --cluster $TMP/one-node.profile --world 4"
# shellcheck disable=SC2086
mpi 4 "$A2A" $asweep --out "$TMP/ameasured" || fail "measured a2a sweep exit $?"
# shellcheck disable=SC2086
"$A2A" $onenode $asweep --out "$TMP/amodelled" || fail "modelled a2a sweep exit $?"
# shellcheck disable=SC2086
mpi 4 "$A2A" --bytes 1K,64K --iters 2 --quiet --out "$TMP/umeasured" || fail "measured uniform exit $?"
# shellcheck disable=SC2086
"$A2A" $onenode --bytes 1K,64K --iters 2 --quiet --out "$TMP/umodelled" ||
    fail "modelled uniform exit $?"
# shellcheck disable=SC2086
mpi 4 "$FFN" $fsweep --out "$TMP/fmeasured" || fail "measured ffn sweep exit $?"
# shellcheck disable=SC2086
"$FFN" $onenode $fsweep --out "$TMP/fmodelled" || fail "modelled ffn sweep exit $?"
for f in ameasured/a2a.csv ameasured/a2a_samples.csv umeasured/a2a.csv umeasured/a2a_samples.csv \
    fmeasured/ffn.csv fmeasured/ffn_samples.csv; do
    v=${f/measured/modelled}
    [ "$(head -1 "$TMP/$f")" = "$(head -1 "$TMP/$v")" ] ||
        fail "$f: measured and modelled headers differ"
    [ "$(rows "$TMP/$f")" -eq "$(rows "$TMP/$v")" ] || fail "$f: measured and modelled row counts differ"
done
python3 - "$TMP" <<'PY' || fail "a2a bytes or ffn counts differ"
import csv, sys
tmp = sys.argv[1]
def load(path, key):
    return {tuple(r[k] for k in key): r for r in csv.DictReader(open(path, newline=""))}
checks = [("ameasured/a2a.csv", ["layout", "routing", "group_limit", "placement", "dedup",
                                 "dispatch_dtype", "batch"], ["bytes_per_peer", "bytes_per_rank"], 192),
          ("umeasured/a2a.csv", ["layout", "bytes_per_peer"], ["bytes_per_rank"], 2),
          ("fmeasured/ffn.csv", ["layout", "routing", "placement", "weight_dtype", "batch"],
           ["tokens_per_rank", "rows", "active_experts", "flops", "weight_bytes"], 32)]
bad = cells = 0
for path, key, cols, points in checks:
    a, b = load(f"{tmp}/{path}", key), load(f"{tmp}/{path.replace('measured', 'modelled')}", key)
    if a.keys() != b.keys() or len(a) != points:
        sys.exit(f"{path}: {len(a)} measured and {len(b)} modelled points, expected {points} alike")
    if {r["source"] for r in b.values()} != {"model"}:
        sys.exit(f"{path}: modelled rows without source model")
    for k in a:
        for c in cols:
            cells += 1
            if a[k][c] != b[k][c]:
                bad += 1
                print(f"{path} {k} {c}: measured {a[k][c]}, modelled {b[k][c]}", file=sys.stderr)
# the deduplicated and fp8 rows are fewer bytes than the pairs in bf16: the sweep tells them apart
a = load(f"{tmp}/amodelled/a2a.csv", checks[0][1])
pairs = [float(r["bytes_per_rank"]) for r in a.values() if r["dedup"] == "pair" and r["dispatch_dtype"] == "bf16"]
fp8 = [float(r["bytes_per_rank"]) for r in a.values() if r["dedup"] == "pair" and r["dispatch_dtype"] == "fp8"]
if not (sum(fp8) < sum(pairs)):
    sys.exit("fp8 rows did not shrink the modelled a2a's bytes")
print(f"a2a and ffn: {cells} count cells compared, {bad} differ")
sys.exit(1 if bad else 0)
PY
echo PASS
