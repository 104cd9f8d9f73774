#!/bin/sh
# SPDX-License-Identifier: MIT
# CI beyond the README's test command: ASan+UBSan (with the exhaustive promise harness),
# valgrind memcheck, libFuzzer, TSan, and the whole suite in a -O0 debug build.
#
#   sh scripts/ci-hardening.sh [asan] [valgrind] [fuzz] [tsan] [debug]  (no argument: all five)
#
# Environment: ATTN_FUZZ_SECONDS (default 60) per fuzz target; ATTN_FUZZ_SEED (1); ATTN_HARD_JOBS
# (default 2) parallel test processes. Build directories: build-asan,
# build-hard-vg, build-fuzz, build-tsan, build-debug. docs/reliability.md explains every
# option and suppression used here.
set -e
cd "$(dirname "$0")/.."
fuzz_seconds="${ATTN_FUZZ_SECONDS:-60}"
# A fixed libFuzzer seed: every CI run replays the same mutation sequence (as far
# as its time allows), so a red fuzz step is a reproducible finding, not luck.
fuzz_seed="${ATTN_FUZZ_SEED:-1}"
jobs="${ATTN_HARD_JOBS:-2}"
steps="${*:-asan valgrind fuzz tsan debug}"
root=$(pwd)

sh scripts/deps.sh clang libclang-rt-14-dev valgrind

# setup <cc> <dir> <meson options...>: configure once, then pick up newly landed modules
setup() {
  cc="$1"; dir="$2"; shift 2
  [ -d "$dir/meson-private" ] || CC="$cc" meson setup "$dir" "$@" >/dev/null
  meson setup --reconfigure "$dir" >/dev/null
}
common="-Dbuildtype=debugoptimized -Dbenchmarks=false -Dexamples=false -Ddocs=disabled"
t0=$(date +%s)
stamp() { echo "== hardening: $1 done after $(($(date +%s) - t0)) s"; }

for step in $steps; do
  case "$step" in
  asan)
    # The whole meson test suite, pkg-config consumer included (it installs
    # and links an unsanitized build of its own, so it runs as usual).
    # allocator_may_return_null: the ENOMEM tests ask for 2^62-byte buffers on
    # purpose and expect NULL back, not an ASan abort. tests/lsan.supp: Open
    # MPI's own leaks in the ring tests; fast_unwind_on_malloc=0 gives the
    # full stacks through MPI's frame-pointer-less code that the entries need.
    setup cc build-asan $common -Db_sanitize=address,undefined -Db_lundef=false
    meson compile -C build-asan
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:fast_unwind_on_malloc=0 \
    LSAN_OPTIONS=suppressions=$root/tests/lsan.supp \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      meson test -C build-asan --print-errorlogs --num-processes "$jobs"
    # The promise harness (tests/test_promises.c) exhaustively: every layout of every
    # input, every alias shift, every workspace misalignment, both extents, under
    # ASan+UBSan (the suite above ran its bounded version).
    ATTN_PROMISES_FULL=1 \
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:fast_unwind_on_malloc=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      meson test -C build-asan --no-rebuild --print-errorlogs promises
    stamp asan ;;
  valgrind)
    # The Check suites (tests/test_<name>.c registered as <name>), one process
    # each (CK_FORK=no), under memcheck; definite leaks are errors. Not the
    # shell-script tests (valgrind would check sh) nor the MPI ring tests (it
    # would check mpirun; the ring code runs under ASan and in the plain suite).
    setup cc build-hard-vg $common
    meson compile -C build-hard-vg
    listed=$(meson test -C build-hard-vg --no-rebuild --list)
    suites=""
    for f in tests/test_*.c; do
      n=${f#tests/test_}; n=${n%.c}
      if echo "$listed" | grep -qx "$n"; then suites="$suites $n"; fi
    done
    # ATTN_PROMISES_LIGHT: the promise harness in one dtype (f64) under memcheck; ASan
    # runs it whole, and exhaustively.
    # ATTN_VMATH_STEP: the GELU ulp sweep samples every 25,703rd float instead of every 257th.
    # --fair-sched=yes: attn's loops run on the pthread OpenBLAS's server, whose threads
    # wait for each other in sched_yield loops; under valgrind's default (unfair) lock the
    # yielding thread takes the lock straight back and test_threads crawled (> 5 min, 14 s
    # with fair scheduling).
    ATTN_VMATH_STEP=25703 ATTN_PROMISES_LIGHT=1 CK_FORK=no meson test -C build-hard-vg --print-errorlogs --num-processes "$jobs" \
      --timeout-multiplier 4 \
      --wrapper "valgrind -q --fair-sched=yes --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --suppressions=$root/tests/valgrind.supp" \
      $suites
    stamp valgrind ;;
  fuzz)
    # Each libFuzzer target from its committed seed corpus, for a bounded time,
    # in a scratch copy of the corpus (CI does not grow the committed one).
    # -runs: about 70% of the executions 60 s gave each target on the 2-core CI machine
    # (docs/reliability.md section 8), scaled to ATTN_FUZZ_SECONDS,
    # so that with the fixed seed a slower or faster machine explores the same inputs;
    # -max_total_time stays the cap. ATTN_FUZZ_RUNS=0: time only.
    # fuzz_ring (ring attention, MPI) runs on 2 ranks under mpirun: rank 0 fuzzes and
    # broadcasts every input to rank 1; Open MPI's own leaks are suppressed
    # (tests/lsan.supp, with full malloc stacks), and each rank saves the input it
    # crashed on as build-fuzz/crash-ring-crash-on-rank<r>.
    setup clang build-fuzz $common -Dfuzz=true -Db_sanitize=address,undefined \
      -Db_lundef=false
    targets=""
    for t in $(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//'); do
      if [ "$t" = fuzz_ring ] && ! { grep -q 'tests/fuzz/fuzz_ring:' build-fuzz/build.ninja &&
                                     command -v mpirun >/dev/null; }; then
        echo "== fuzz ring skipped: no MPI"; continue
      fi
      targets="$targets $t"
    done
    meson compile -C build-fuzz $(for t in $targets; do printf 'tests/fuzz/%s ' "$t"; done)
    for t in $targets; do
      name=${t#fuzz_}
      work=build-fuzz/corpus-$name
      rm -rf "$work"; mkdir -p "$work"
      [ -d "tests/fuzz/corpus/$name" ] && cp "tests/fuzz/corpus/$name"/* "$work"/ 2>/dev/null || true
      case "$name" in
      view) runs=75000 ;; gemm) runs=140000 ;; sdpa) runs=95000 ;; layers) runs=120000 ;;
      backward) runs=42000 ;; sdpa_backward) runs=14000 ;; layers_backward) runs=33000 ;;
      ring) runs=1500 ;; *) runs=-1 ;;
      esac
      [ "$runs" -gt 0 ] && runs=$((runs * fuzz_seconds / 60))
      [ "${ATTN_FUZZ_RUNS:-1}" = 0 ] && runs=-1 # libFuzzer: -1 = unlimited
      launch="" unwind=""
      if [ "$name" = ring ]; then
        launch="mpirun -np 2 --oversubscribe"; unwind=":fast_unwind_on_malloc=0"
      fi
      echo "== fuzz $name for $fuzz_seconds s or $runs runs, whichever comes first"
      if ! OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
           OPENBLAS_NUM_THREADS=1 \
           ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1$unwind \
           LSAN_OPTIONS=suppressions=$root/tests/lsan.supp \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
           $launch "build-fuzz/tests/fuzz/$t" -max_total_time="$fuzz_seconds" -runs="$runs" \
             -seed="$fuzz_seed" -timeout=20 -rss_limit_mb=2048 -max_len=512 -print_final_stats=1 \
             -artifact_prefix=build-fuzz/crash-"$name"- "$work" >"$work.log" 2>&1; then
        tail -n 60 "$work.log"; echo "== fuzz $name FAILED (input saved as build-fuzz/crash-$name-*)"
        exit 1
      fi
      grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb|fuzz_ring:)|cov:' "$work.log" | tail -n 5
    done
    stamp fuzz ;;
  tsan)
    # The thread-safety suite under ThreadSanitizer. Debian's OpenBLAS is not
    # TSan-instrumented: tests/tsan.supp silences races whose frames are in
    # libopenblas (its own thread server), nothing in attn. die_after_fork=0:
    # th_fork_child forks after a threaded call, while threads that call ran on
    # may still be alive; TSan would then refuse the child's new threads.
    setup clang build-tsan $common -Db_sanitize=thread -Db_lundef=false
    meson compile -C build-tsan tests/test_threads
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 die_after_fork=0 suppressions=$root/tests/tsan.supp" \
      meson test -C build-tsan --no-rebuild --print-errorlogs threads
    stamp tsan ;;
  debug)
    # The whole suite in a plain --buildtype=debug build (-O0, assertions on): what a
    # parent project gets with attn as a meson subproject. Statuses must not depend on
    # the optimizer or the stack layout (gm_errors did), and the run functions' debug
    # assertions (the public check re-run) hold on every call the suite makes.
    setup cc build-debug -Dbuildtype=debug -Dbenchmarks=false -Dexamples=false -Ddocs=disabled
    meson compile -C build-debug
    meson test -C build-debug --print-errorlogs --num-processes "$jobs" --timeout-multiplier 3
    stamp debug ;;
  *) echo "ci-hardening: unknown step '$step'" >&2; exit 2 ;;
  esac
done
