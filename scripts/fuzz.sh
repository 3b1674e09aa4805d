#!/usr/bin/env bash
# Run every fuzzer for SECONDS on its kept corpus, one after the other.
#   scripts/fuzz.sh SECONDS            then merge what found new coverage
#                                      into tests/fuzz/corpus/TARGET
#   scripts/fuzz.sh SECONDS --no-merge make test's short run: the tree is
#                                      left as it was
# Builds build-fuzz (clang, libFuzzer) when it is missing. New inputs go
# to build-fuzz/corpus-TARGET; a crash leaves its input in build-fuzz/ and
# fails the run. Prints, per target: executions, corpus before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: scripts/fuzz.sh SECONDS [--no-merge]}
merge=1
[ "${2:-}" = --no-merge ] && merge=0
targets=$(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_\(.*\)\.c|\1|' | grep -v '^rig$')

if [ ! -d build-fuzz ] || [ $merge -eq 1 ]; then
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DRDMX_FUZZ=ON >/dev/null
	cmake --build build-fuzz -j "$(nproc)" >/dev/null
fi

count() { find "$1" -type f | wc -l; }
for t in $targets; do
	kept=tests/fuzz/corpus/$t
	work=build-fuzz/corpus-$t
	mkdir -p "$work"
	before=$(count "$kept")
	# The kept seeds stay read-only here; new inputs land in $work.
	if ! build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$seconds" \
		-artifact_prefix=build-fuzz/ "$work" "$kept" \
		>"build-fuzz/fuzz-$t.log" 2>&1; then
		tail -40 "build-fuzz/fuzz-$t.log"
		echo "fuzz_$t FAILED (input saved under build-fuzz/)"
		exit 1
	fi
	runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "build-fuzz/fuzz-$t.log")
	after=$before
	if [ $merge -eq 1 ]; then
		# Only inputs that add coverage to the kept corpus join it.
		build-fuzz/tests/fuzz/fuzz_$t -merge=1 "$kept" "$work" \
			>"build-fuzz/merge-$t.log" 2>&1
		after=$(count "$kept")
	fi
	echo "fuzz_$t: $runs runs in ${seconds}s, no crash; kept corpus $before -> $after"
done
