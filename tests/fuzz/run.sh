#!/usr/bin/env bash
# run.sh - runs one fuzz target for a bounded time (FUZZ_SECONDS, default 20) on a scratch copy of
# its seed corpus, so the source tree is never written; a crash input is kept under
# fuzz-artifacts/ beside the target and fails the test (then add it to the corpus once fixed).
set -u
target=$1 seeds=$2
seconds=${FUZZ_SECONDS:-20}
work=$(mktemp -d "${TMPDIR:-/tmp}/moeperf-fuzz.XXXXXX")
trap 'rm -rf "$work" /tmp/moeperf-fuzz-*' EXIT
mkdir -p "$work/corpus" "$(dirname "$target")/fuzz-artifacts"
[ -d "$seeds" ] && cp -r "$seeds"/. "$work/corpus/"
# libFuzzer reports a crash with exit 77 by default, which the test runner reads as "skipped":
# every finding must fail the test instead
"$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -artifact_prefix="$(dirname "$target")/fuzz-artifacts/$(basename "$target")-" \
    "$work/corpus" >"$work/log" 2>&1
rc=$?
grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb)|==[0-9]+==|SUMMARY|Test unit written|ERROR" "$work/log"
[ $rc -eq 0 ] || tail -n 40 "$work/log"
exit $rc
