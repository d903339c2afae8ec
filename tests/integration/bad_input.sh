#!/usr/bin/env bash
# bad_input.sh - bad input exits 2 with one line naming the flag or file and what is accepted, and
# leaves no CSV row behind.
. "$(dirname "$0")/lib.sh"

printf 'expert,count\n0,5\n1,x\n' >"$TMP/bad-trace.csv"
printf 'token,expert0\n0,1\n' >"$TMP/narrow-trace.csv"
printf 'hidden=1024\nffn=512\nexperts=8\ntopk=2\nlayers=4\nflavour=vanilla\n' >"$TMP/bad-model.ini"
printf 'base=mixtral-8x7b\nhidden=abc\n' >"$TMP/nan-model.ini"
touch "$TMP/file"
printf 'base = cpu-host\npcie_bw = 0\n' >"$TMP/no-pcie.profile"
SMALL="--hidden 32 --ffn 32 --batch 1 --iters 1 --warmup 0"

# expect WORD ARGS...: exit 2, exactly one stderr line, mentioning WORD ($TOOL, moeperf-layer unless set)
TOOL=moeperf-layer
expect() {
    word=$1
    shift
    set +e
    "$BIN/$TOOL" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || fail "'$*' exited $rc, expected 2: $(cat "$TMP/err")"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "'$*' printed $(wc -l <"$TMP/err") lines: $(cat "$TMP/err")"
    grep -q -- "$word" "$TMP/err" || fail "'$*' did not name $word: $(cat "$TMP/err")"
    printf '%-40s -> %s\n' "$*" "$(cat "$TMP/err")" | cut -c1-160
}

expect --frobnicate --frobnicate 3
expect --iters $SMALL --iters 0
expect --batch $SMALL --batch abc
expect --batch $SMALL --batch 8:2
expect "gives 16 twice" $SMALL --batch 16,1:16:x2
expect "--world 8: sets the virtual ranks of --backend model" $SMALL --world 8
# a model world's state grows with its square: --world stops where a point still takes seconds
expect "--world: 4096 is out of range \[1, 2048\]" --backend model --batch 1 --world 4096
TOOL=moeperf-a2a expect "--routing zipf:1.2: the uniform pattern" --bytes 1K --iters 1 --routing zipf:1.2
TOOL=moeperf-a2a expect "--placement round-robin: the uniform pattern" --bytes 1K --iters 1 --placement round-robin
expect --tokens-per-rank $SMALL --tokens-per-rank 4
expect --tokens-per-rank --hidden 32 --ffn 32 --iters 1 --tokens-per-rank 0
expect --expert-cache $SMALL --experts 8 --expert-cache 0
expect --expert-cache $SMALL --experts 8 --expert-cache 9
expect --expert-cache $SMALL --experts 8 --expert-cache 4:mru
expect --expert-cache $SMALL --experts 8 --expert-cache 4 --overlap 2 --backend model --comm model --cluster cpu-host --world 2
TOOL=moeperf-ffn expect --tokens-per-rank $SMALL --tokens-per-rank 4
TOOL=moeperf-ffn expect --expert-cache $SMALL --experts 8 --expert-cache 9
TOOL=moeperf-ffn expect --expert-cache $SMALL --experts 8 --expert-cache 2 --backend model --comm model --cluster "$TMP/no-pcie.profile" --world 2
TOOL=moeperf-a2a expect --tokens-per-rank --pattern moe $SMALL --tokens-per-rank=2
expect --backend $SMALL --backend gpu
expect --layout $SMALL --layout tp2ep2
expect --layout $SMALL --layout tp0ep1
expect --topk $SMALL --experts 4 --topk 8
expect --routing $SMALL --routing zipf:abc
expect --routing $SMALL --routing hot:20:3 --experts 8
expect --placement $SMALL --placement replicate-hot:99 --experts 8
expect --placement $SMALL --placement sideways
expect --gemm $SMALL --gemm tiled
expect "--gemm skinny" $SMALL --gemm skinny
expect "--gemm grouped" $SMALL --gemm grouped
expect "--gemm fused" $SMALL --gemm fused
expect /nonexistent $SMALL --routing trace:/nonexistent/trace.csv
expect bad-trace.csv $SMALL --routing trace:$TMP/bad-trace.csv
expect narrow-trace.csv $SMALL --topk 2 --experts 8 --routing trace:$TMP/narrow-trace.csv
expect flavour --model "$TMP/bad-model.ini"
expect nan-model.ini --model "$TMP/nan-model.ini"
expect --model --model no-such-model
expect --out $SMALL --out "$TMP/file/sub"
expect --seq $SMALL --seq -1
# two micro-batches are modelled only; a measured run refuses them; 3 is out of range anywhere
expect --micro-batches $SMALL --micro-batches 1,2
expect --micro-batches $SMALL --micro-batches 3 --backend model --comm model --cluster cpu-host --world 1
expect --context $SMALL --context 0
# a prefill step is modelled only; its word is decode or prefill; chunks split prompts alone
expect "--phase prefill: the cpu backend" $SMALL --phase prefill
expect "--phase: 'both'" $SMALL --phase both --backend model --comm model --cluster cpu-host --world 1
expect "--chunk 512: chunks split prompts" $SMALL --chunk 512 --backend model --comm model --cluster cpu-host --world 1
expect "--chunk 512: chunks split prompts" $SMALL --chunk 512 --phase decode,prefill --backend model --comm model --cluster cpu-host --world 1

# moeperf-a2a: a per-peer size one MPI datatype cannot hold, a size over the option's range, and a
# MoE batch whose rows overflow the int counts (and whose buffer size would wrap a size_t) are
# refused before any buffer is allocated, and nothing is written
TOOL=moeperf-a2a
A2A="--iters 1 --warmup 0 --out $TMP/a2a"
expect "--bytes" $A2A --bytes 1K,2G
expect "1 to 2147483647 with --comm mpi" $A2A --bytes 3G
expect "--bytes" $A2A --bytes 5G
expect "--batch" $A2A --pattern moe --batch 16777216 --seq 1048576 --topk 1024 --experts 1024 \
    --hidden 1048576
# --overlap: --dedup node's two phases alone overlap; above the chunk limit
expect "--overlap 2" $A2A --overlap 1,2
expect "--overlap 4 with --dedup rank" $A2A --pattern moe --dedup node,rank --overlap 4
expect "--overlap" $A2A --pattern moe --dedup node --overlap 33
[ ! -e "$TMP/a2a/a2a.csv" ] || [ "$(rows "$TMP/a2a/a2a.csv")" -eq 0 ] || fail "a2a rows written"
TOOL=moeperf-layer

# under mpirun the message is printed once, and tp·ep must match the ranks
set +e
mpi 2 "$BIN/moeperf-layer" $SMALL --layout tp1ep4 --out "$TMP/mpi" >/dev/null 2>"$TMP/err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "mpirun with a mismatched layout exited $rc"
[ "$(grep -c '^moeperf-layer:' "$TMP/err")" -eq 1 ] || fail "expected one message: $(cat "$TMP/err")"
# D not divisible by tp is refused before anything is measured, even when it is the second layout
set +e
mpi 2 "$BIN/moeperf-layer" $SMALL --ffn 31 --layout tp1ep2,tp2ep1 --out "$TMP/mpi" >/dev/null 2>"$TMP/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- '--ffn (31)' "$TMP/err" || fail "D % tp != 0: exit $rc: $(cat "$TMP/err")"
# nothing measured, and nothing made: a refused command leaves no --out behind
[ ! -e "$TMP/mpi" ] || fail "a refused command made --out: $(ls "$TMP/mpi")"
while IFS='|' read -r tool args; do
    rc=0
    # shellcheck disable=SC2086
    "$BIN/$tool" $SMALL $args --out "$TMP/refused" >/dev/null 2>"$TMP/err" || rc=$?
    [ "$rc" -eq 2 ] && [ ! -e "$TMP/refused" ] ||
        fail "$tool $args: exit $rc, --out $([ -e "$TMP/refused" ] && echo made || echo absent): $(cat "$TMP/err")"
done <<'CASES'
moeperf-layer|--micro-batches 2
moeperf-layer|--phase prefill
moeperf-layer|--backend model --world 1 --chunk 64
moeperf-layer|--backend model --layout tp3ep5 --world 16
moeperf-layer|--backend model --world 2 --check
moeperf-a2a|--pattern moe --dedup node --overlap 2 --batch 8 --backend model --world 2 --dispatch-dtype fp4
moeperf-ffn|--expert-cache 2 --graph
CASES
echo "refused commands leave no --out"
echo PASS
