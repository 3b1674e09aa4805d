#!/usr/bin/env bash
# make test: build three ways and run everything.
#   build-asan  ASan + UBSan build of the library and the whole suite
#   build-tsan  the same under ThreadSanitizer (progress thread vs callers)
#   build-fuzz  clang + libFuzzer: each target for FUZZ_SECONDS on its corpus
#   tests/vm    the conformance suite over verbs on SoftRoCE (rxe) inside a
#               Debian kernel under qemu, with the host's build; then the
#               extras, and beside them, soak and packages, tcp and rxe
#               across a lossy, slow veth (netem)
#   soak        a minute of bench clients against tcp and shm servers,
#               failing if their memory or descriptors grow
#   packages    make install into a DESTDIR; make deb, the packages
#               installed, used and removed (root only)
#   build       the normal build; its suite runs last, verbosely, so every
#               conformance case is named in the output
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}

# Each stage's wall time, said again at the end (also of a failed run),
# so that a slow stage shows where CI's minutes went.
stage_name="" stage_start=$SECONDS stage_times=""
stage_end() {
	[ -n "$stage_name" ] || return 0
	stage_times+=$(printf '%5d s  %s' $((SECONDS - stage_start)) "$stage_name")$'\n'
	stage_name=""
}
stage() {
	stage_end
	stage_name=$*
	stage_start=$SECONDS
	printf '\n==== %s ====\n' "$*"
}
times_at_exit() {
	local rc=$?
	stage_end
	printf '\n==== wall time by stage (%d s in all) ====\n%s' "$SECONDS" "$stage_times"
	exit $rc
}
trap times_at_exit EXIT

stage "format (clang-format, .clang-format)"
if ! clang-format --dry-run --Werror $(git ls-files '*.c' '*.h') 2>/dev/null; then
	echo "some files are not formatted: run 'make format' and commit"
	clang-format --dry-run $(git ls-files '*.c' '*.h') 2>&1 | head -20
	exit 1
fi
echo "all C files formatted"

stage "build (gcc, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"

stage "build with ASan + UBSan"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
	-DRDMX_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j "$jobs"

stage "build with TSan (clang)"
CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug \
	-DRDMX_SANITIZE=thread >/dev/null
cmake --build build-tsan -j "$jobs"

stage "build the fuzzers (clang, libFuzzer)"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DRDMX_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$jobs"

stage "fuzz every target for ${fuzz_seconds}s"
scripts/fuzz.sh "$fuzz_seconds" --no-merge

# The suites run four cases at a time: most wait on peers, timeouts and
# children (one at a time, the ASan suite kept 0.6 of a CPU busy; two at
# a time, 1.24 of the 2; four, 1.7: ASan 134 -> 98 s, TSan 185 -> 145,
# the last suite 115 -> 78). Those that judge by the clock run alone
# (RUN_SERIAL, tests/CMakeLists.txt).
ctest_jobs=4
stage "suite under ASan + UBSan"
(cd build-asan && ctest --output-on-failure -j $ctest_jobs)

stage "suite under TSan"
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $ctest_jobs)

stage "verbs: conformance over real kernel RDMA (rxe) in a qemu guest"
vm_logs=$(mktemp -d) netem_pid=""
# vm_boot NAME SUITE-ARGS...: one boot of the guest, its output kept in
# $vm_logs/NAME; a failure's name goes to $vm_logs/failed.
vm_boot() {
	local name=$1 rc=0
	shift
	tests/vm/vm.sh run tests/vm/suite.sh build "$@" 2>&1 |
		tee "$vm_logs/$name" || rc=$?
	[ $rc -eq 0 ] || echo "$name" >>"$vm_logs/failed"
}
# Each failed boot's failed names and reasons again, where a log's tail
# shows them; then fail.
vm_report() {
	[ -s "$vm_logs/failed" ] || return 0
	while read -r name; do
		echo "== the guest's $name boot failed; what it said of it:"
		grep -E '\[ *FAILED *\]|^    \| ' "$vm_logs/$name" |
			head -60 || true
		# Why, again, where CI's excerpt shows it: the failed
		# cases' log lines and cmocka's reasons, the last of them.
		echo "== why, in rdmx's and cmocka's words:"
		grep -E '^    \| (rdmx: (error|warn)|\[ +(ERROR|LINE) +\]|ERROR: test_)' \
			"$vm_logs/$name" | tail -14 || true
		if grep -q '^failed:$' "$vm_logs/$name"; then
			sed -n '/^failed:$/,$p' "$vm_logs/$name" | tail -30
		else
			tail -15 "$vm_logs/$name"
		fi
	done <"$vm_logs/failed"
	echo "verbs suite in the guest FAILED"
	exit 1
}
if why=$(tests/vm/vm.sh check 2>&1); then
	# One boot for the conformance suite, one for the rest.
	vm_boot conformance conformance sendrecv rma stats srq verbs_cm page \
		kv atomic access peer_death conns progress errors mem
	vm_report
	# A link that loses 1% and delays 5 ms: tcp and rxe, every byte
	# checked. Its cases wait on the link's delays more than they
	# compute: the boot runs beside the extras, soak and packages, its
	# output said once it is done. (Begun after the extras, it went on
	# 48 s past packages on a slow host; the extras check paths, not
	# times.)
	vm_boot netem netem sendrecv rma atomic access stats srq progress \
		errors >/dev/null 2>&1 &
	netem_pid=$!
	vm_boot extras extras
	vm_report
else
	echo "skip: the RDMA guest cannot boot here: $why"
	rm -rf "$vm_logs"
fi

stage "soak: a minute of bench clients on tcp and shm, the servers sampled"
scripts/soak.sh 1 build/apps/rdmx

stage "packages: make install, then make deb installed, used and removed"
tests/pkg/test_make_install.sh
deb_rc=0
tests/pkg/test_deb.sh || deb_rc=$?
[ $deb_rc -eq 0 ] || [ $deb_rc -eq 77 ] || { echo "package test FAILED"; exit 1; }

if [ -n "$netem_pid" ]; then
	stage "verbs and tcp over a lossy veth (netem) in the guest, run beside the extras, soak and packages"
	wait "$netem_pid" || true
	cat "$vm_logs/netem"
	vm_report
	rm -rf "$vm_logs"
fi

# Each verbose line says its case's number.
stage "suite (every case by name)"
(cd build && ctest --verbose -j $ctest_jobs) 2>&1 | grep -vE '^[0-9]+: rdmx: ' |
	grep -E '^[0-9]+: (\[|ok |FAIL )|Test *#|tests passed|tests failed|FAILED|Passed|\*\*\*|skip:'
exit "${PIPESTATUS[0]}"
