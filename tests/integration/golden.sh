#!/usr/bin/env bash
# golden.sh - a fixed sweep on the CPU path (moeperf-layer, -a2a, -ffn under MPI) and on the model
# writes the same CSV as the stored expected files in tests/integration/golden/, timing columns
# left out of measured files (every column of a modelled file is kept: the model is deterministic);
# the model's pipeline and its counted path agree (below).
# A change that alters these rows on purpose regenerates them: golden.sh BUILD_DIR --update.
. "$(dirname "$0")/lib.sh"
GOLDEN=$(cd "$(dirname "$0")/golden" && pwd)
UPDATE=${2:-}

# the runs, each into $TMP/NAME
# each model sweep three times: through the layer's own pipeline on virtual clocks
# (core/cluster_model/vrun.h, the default), and on the planner's counted path
# (MOEPERF_MODEL_COUNTED=1) with the dispatch modes' traffic builders (_counted) and with each
# draw's traffic read off traced ranks running the layer's stages (_traced,
# core/cluster_model/vexec.h, MOEPERF_MODEL_TRACED=1)
for traced in "" _counted _traced; do
    export MOEPERF_MODEL_COUNTED=${traced:+1}
    export MOEPERF_MODEL_TRACED=$([ "$traced" = _traced ] && echo 1)
    "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
        --layout tp1ep16,tp2ep8 --batch 1,64,512 --routing uniform,zipf:1.2 \
        --placement contiguous,replicate-hot:2 --dispatch dynamic,padded:1.5 --iters 4 \
        --quiet --out "$TMP/model$traced" || fail "model$traced run exit $?"
    "$BIN/moeperf-layer" --backend model --comm model --cluster a100-hdr --model deepseek-v3 \
        --world 64 --layout tp1ep64 --batch 8,256 --routing hot:4:20,lognormal:1 --overlap 1,4 \
        --iters 3 --quiet --out "$TMP/model_overlap$traced" || fail "model$traced --overlap run exit $?"
    # replicas on some ranks of two nodes (the copy on the token's node first) and --dedup node's
    # hops
    "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
        --layout tp1ep16 --batch 64,512 --routing zipf:1.2 --placement eplb:8,replicate-hot:2 \
        --dedup pair,node --iters 2 --quiet --out "$TMP/model_eplb$traced" ||
        fail "model$traced eplb run exit $?"
    # a straggler, whose TP peer waits in the TP reduce and whose EP group waits in the combine,
    # unpipelined and pipelined: compared only between the sources
    "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
        --layout tp2ep8 --batch 64 --routing zipf:1.2 --straggle 3:50 --overlap 1,2 --iters 2 \
        --quiet --out "$TMP/model_straggle$traced" || fail "model$traced straggler run exit $?"
    # gate routing (the model's draws of it), group-limited, and an expert cache (a fresh draw
    # each step): compared only between the two sources, not with stored files
    "$BIN/moeperf-layer" --backend model --comm model --cluster h100-ndr --model seed-k3 \
        --layout tp1ep16 --batch 8,96 --routing gate,hot:2:20 --group-limit off,2:1 \
        --dispatch dynamic,padded --expert-cache off,4,4:static --warmup 2 --iters 6 --quiet \
        --out "$TMP/model_cache$traced" || fail "model$traced cache run exit $?"
done
unset MOEPERF_MODEL_TRACED MOEPERF_MODEL_COUNTED
mpi 4 "$BIN/moeperf-layer" --hidden 64 --ffn 32 --experts 8 --topk 2 --shared 1 \
    --layout tp1ep4,tp2ep2 --batch 1,24 --routing uniform,hot:2:30,gate --placement contiguous,round-robin \
    --warmup 1 --iters 2 --check --no-flush-cache --quiet --out "$TMP/layer" || fail "layer run exit $?"
mpi 4 "$BIN/moeperf-layer" --hidden 64 --ffn 32 --experts 8 --topk 2 \
    --layout tp1ep4 --batch 16 --routing zipf:1.1 --placement eplb:12 --dispatch dynamic,padded,padded:1.2 \
    --warmup 1 --iters 2 --check --no-flush-cache --quiet --out "$TMP/layer_modes" ||
    fail "layer dispatch-mode run exit $?"
mpi 4 "$BIN/moeperf-layer" --hidden 64 --ffn 32 --experts 8 --topk 2 --shared 1 --layout tp1ep4 \
    --batch 8,40 --routing lognormal:1 --overlap 1,2,3 --warmup 1 --iters 2 --check --no-flush-cache \
    --quiet --out "$TMP/layer_overlap" || fail "layer --overlap run exit $?"
mpi 2 "$BIN/moeperf-a2a" --bytes 1K:64K:x4 --iters 2 --quiet --out "$TMP/a2a" || fail "a2a run exit $?"
mpi 2 "$BIN/moeperf-a2a" --pattern moe --hidden 64 --experts 8 --topk 2 --batch 4,32 \
    --routing hot:1:50 --iters 2 --quiet --out "$TMP/a2a_moe" || fail "a2a moe run exit $?"
"$BIN/moeperf-ffn" --hidden 64 --ffn 32 --experts 4 --topk 2 --batch 1,8,64 --routing uniform,zipf:1.5 \
    --iters 2 --no-flush-cache --quiet --out "$TMP/ffn" || fail "ffn run exit $?"

# stable NAME/FILE: FILE without its timing columns and the host (measured) or whole (model), to
# stdout
stable() {
    python3 - "$TMP/$1" <<'PY'
import csv, re, sys
path = sys.argv[1]
modelled = "/model" in path
timing = re.compile(r"(_us$|GBps$|GFLOPs$|^bound$|^roofline_fraction$|^comm_comp_ratio$|"
                    r"^bubble_ratio$|^wait_ratio$|^check_error$|^overlap_efficiency$|^host$|^spread$|^noisy$)")
rows = list(csv.reader(open(path, newline="")))
keep = [i for i, c in enumerate(rows[0]) if modelled or not timing.search(c)]
out = csv.writer(sys.stdout, lineterminator="\n")
for r in rows:
    out.writerow([r[i] for i in keep])
PY
}

files="model/layer.csv model/layer_ranks.csv model/layer_samples.csv model/layer_rank_samples.csv
    layer/layer_rank_samples.csv model_overlap/layer.csv
    model_overlap/layer_ranks.csv model_eplb/layer.csv model_eplb/layer_ranks.csv layer/layer.csv layer/layer_ranks.csv layer/layer_samples.csv
    layer_modes/layer.csv layer_modes/layer_ranks.csv layer_overlap/layer.csv
    layer_overlap/layer_ranks.csv a2a/a2a.csv a2a/a2a_samples.csv
    a2a_moe/a2a.csv ffn/ffn.csv ffn/ffn_samples.csv"
bad=0
for f in $files; do
    want=$GOLDEN/$(echo "$f" | tr / _)
    stable "$f" >"$TMP/got.csv" || fail "cannot read $f"
    if [ "$UPDATE" = --update ]; then
        cp "$TMP/got.csv" "$want"
        continue
    fi
    [ -f "$want" ] || fail "no expected file $want (golden.sh BUILD_DIR --update writes it)"
    if ! cmp -s "$TMP/got.csv" "$want"; then
        echo "FAIL: $f differs from $(basename "$want"):" >&2
        diff "$want" "$TMP/got.csv" | head -n 10 >&2
        bad=1
    fi
done
# the counted path: the same bytes from the builders and from traced ranks, in every file; and
# the same bytes as the pipeline, timing included, where its closed forms are the pipeline's
# rules (no --dedup rank|node, no gate routing); the counts everywhere. The pipeline alone times
# the deduplicated dispatch's metadata exchanges apart, each node's intra-node phase at its own
# meeting and the route's wait for the slowest gate, so those timings differ.
for run in model model_overlap model_eplb model_cache model_straggle; do
    for f in layer.csv layer_ranks.csv layer_samples.csv layer_rank_samples.csv; do
        if ! cmp -s "$TMP/${run}_counted/$f" "$TMP/${run}_traced/$f"; then
            echo "FAIL: $run/$f differs when traced ranks make the traffic:" >&2
            diff "$TMP/${run}_counted/$f" "$TMP/${run}_traced/$f" | head -n 10 >&2
            bad=1
        fi
        case $run in
        model_eplb | model_cache) counts_only=1 ;;
        *) counts_only= ;;
        esac
        if ! python3 - "$TMP/$run/$f" "$TMP/${run}_counted/$f" "$counts_only" <<'PY'; then
import csv, re, sys
a, b = (list(csv.reader(open(p, newline=""))) for p in sys.argv[1:3])
timing = re.compile(r"(_us$|GBps$|GFLOPs$|^bound$|_fraction$|_ratio$|^overlap_efficiency$|"
                    r"^tok_s_gpu$|^wall_|^timed_)")
keep = [i for i, c in enumerate(a[0]) if not (sys.argv[3] and timing.search(c))]
bad = len(a) != len(b) or a[0] != b[0] or any(
    [r[i] for i in keep] != [s[i] for i in keep] for r, s in zip(a, b))
sys.exit(1 if bad else 0)
PY
            echo "FAIL: $run/$f: the pipeline and the counted path disagree${counts_only:+ on counts}:" >&2
            diff "$TMP/$run/$f" "$TMP/${run}_counted/$f" | head -n 6 >&2
            bad=1
        fi
    done
done
[ "$bad" -eq 0 ] || exit 1
# the check passed on every measured point (a sweep that stopped computing the layer would still
# write its counts)
for f in layer/layer.csv layer_modes/layer.csv layer_overlap/layer.csv; do
    col "$TMP/$f" check_error | awk '$1 == "" || $1 + 0 > 1e-4 { print "FAIL: check_error " $1; bad = 1 }
        END { exit bad }' || fail "$f: a point failed its check"
done
echo PASS
