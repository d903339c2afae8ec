#!/usr/bin/env bash
# alloc.sh - the timed loop allocates nothing on any of 2 and 4 ranks (all-to-all and TP paths).
. "$(dirname "$0")/lib.sh"
mpi 2 "$BUILD/tests/test_layer_alloc" || fail "2 ranks"
mpi 4 "$BUILD/tests/test_layer_alloc" || fail "4 ranks"
echo PASS
