#!/usr/bin/env bash
# Run every fuzzer for SECONDS on its kept corpus, as many at once as
# there are CPUs.
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
# One target: fuzz, then merge; its report line in build-fuzz/fuzz-T.result.
fuzz_one() {
	local t=$1 kept=tests/fuzz/corpus/$1 work=build-fuzz/corpus-$1
	local before after runs
	mkdir -p "$work"
	before=$(count "$kept")
	# The kept seeds stay read-only here; new inputs land in $work.
	if ! build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$seconds" \
		-artifact_prefix=build-fuzz/ "$work" "$kept" \
		>"build-fuzz/fuzz-$t.log" 2>&1; then
		{
			tail -40 "build-fuzz/fuzz-$t.log"
			echo "fuzz_$t FAILED (input saved under build-fuzz/)"
		} >"build-fuzz/fuzz-$t.result"
		return 1
	fi
	runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "build-fuzz/fuzz-$t.log")
	after=$before
	if [ $merge -eq 1 ]; then
		# Only inputs that add coverage to the kept corpus join it.
		build-fuzz/tests/fuzz/fuzz_$t -merge=1 "$kept" "$work" \
			>"build-fuzz/merge-$t.log" 2>&1
		after=$(count "$kept")
	fi
	echo "fuzz_$t: $runs runs in ${seconds}s, no crash; kept corpus $before -> $after" \
		>"build-fuzz/fuzz-$t.result"
}

# As many targets at once as there are CPUs (each fuzzer runs on one): the
# four took 2 minutes of make test one after the other. Reports in order.
jobs=$(nproc)
pids=() failed=0
rm -f build-fuzz/fuzz-*.result
for t in $targets; do
	if [ ${#pids[@]} -ge "$jobs" ]; then
		wait "${pids[0]}" || failed=1
		pids=("${pids[@]:1}")
	fi
	fuzz_one "$t" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
for t in $targets; do cat "build-fuzz/fuzz-$t.result"; done
exit $failed
