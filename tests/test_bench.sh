#!/bin/sh
# SPDX-License-Identifier: MIT
# attn-bench on tiny sizes: its CSV columns, the analytic counts against the formulas
# recomputed here (with --window too), the seed's table verbatim, and exit status 2 on bad
# arguments. TAP.
bench="$1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
n_tests=0; failed=0
ok() { n_tests=$((n_tests + 1)); echo "ok $n_tests - $1"; }
not_ok() {
  n_tests=$((n_tests + 1)); failed=1; echo "not ok $n_tests - $1"
  [ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"
  return 0
}
check() { # description, then a command
  d="$1"; shift
  if "$@"; then ok "$d"; else not_ok "$d"; fi
}

# --- the lecture-7 seed's table, as the seed prints it (python3 seed 003, demo 6) ---
cat >"$tmp/seed" <<'EOF'
        128               0.91           0.03           2.7%
        512               3.62           0.40          10.0%
       1024               7.25           1.61          18.2%
       4096              28.99          25.77          47.1%
      16384             115.96         412.32          78.0%
      65536             463.86        6597.07          93.4%
EOF
"$bench" --seed-table >"$tmp/table" 2>"$tmp/err"
tail -n 6 "$tmp/table" >"$tmp/rows"
check "seed table (d 768, n 128..65536) reproduced byte for byte" cmp -s "$tmp/seed" "$tmp/rows"

# --- the columns every consumer (compare_torch.py, the docs) relies on ---
expected="d,heads,d_head,ff,batch,dtype,causal,algo,threads,n,reps,warmup"
for k in macs flops; do
  for p in lin attn mha block; do expected="$expected,${p}_$k"; done
done
expected="$expected,attn_share"
for p in lin attn mha block; do expected="$expected,${p}_ms_median,${p}_ms_min,${p}_ms_max"; done
for p in lin attn mha block; do expected="$expected,${p}_gflops"; done
expected="$expected,gemm_gflops"
for p in lin attn mha block; do expected="$expected,${p}_frac_gemm"; done
for p in lin attn mha block; do expected="$expected,${p}_ws_bytes"; done
expected="$expected,theory_crossover,measured_crossover,crossover_kind"
expected="$expected,gemm_gflops_start,gemm_gflops_end,gemm_spread,tuned_env,attn_version"
expected="$expected,blas_config,blas_corename,blas_threading,blas_threads,omp_threads,cpu,env,date"

# Recompute the analytic columns from the formulas: linear B(4 n d^2 + 2 n d F),
# attention B 2 n^2 d (B n^2 d causal), MHA B 4 n d^2 + attention, block linear +
# attention, FLOPs = 2 MAC, theory crossover 2d + F (doubled causal).
verify() { # csv, d, heads, ff, batch, causal, rows expected
  awk -F, -v d="$2" -v h="$3" -v f="$4" -v b="$5" -v causal="$6" -v rows="$7" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
      n = $col["n"]; seen++
      lin = b * (4 * n * d * d + 2 * n * d * f)
      att = b * 2 * n * n * d; if (causal) att = att / 2
      want["lin"] = lin; want["attn"] = att; want["mha"] = b * 4 * n * d * d + att
      want["block"] = lin + att
      for (p in want) {
        if ($col[p "_macs"] != want[p]) { print "n " n ": " p "_macs " $col[p "_macs"] " != " want[p]; bad = 1 }
        if ($col[p "_flops"] != 2 * want[p]) { print "n " n ": " p "_flops wrong"; bad = 1 }
        if (!($col[p "_ms_median"] > 0) || $col[p "_ms_min"] > $col[p "_ms_median"] ||
            $col[p "_ms_median"] > $col[p "_ms_max"]) { print "n " n ": " p " times not ordered"; bad = 1 }
        if (!($col[p "_gflops"] > 0)) { print "n " n ": " p "_gflops not positive"; bad = 1 }
      }
      if ($col["d"] != d || $col["heads"] != h || $col["d_head"] != d / h || $col["ff"] != f ||
          $col["batch"] != b || $col["causal"] != causal) { print "config columns wrong"; bad = 1 }
      if ($col["theory_crossover"] != (2 * d + f) * (causal ? 2 : 1)) { print "theory crossover wrong"; bad = 1 }
      if (!($col["gemm_gflops"] > 0)) { print "gemm_gflops not positive"; bad = 1 }
      # the reference counted is the better of the start and end measurements
      best = $col["gemm_gflops_start"] > $col["gemm_gflops_end"] ? $col["gemm_gflops_start"] : $col["gemm_gflops_end"]
      if ($col["gemm_gflops"] != best) { print "gemm_gflops " $col["gemm_gflops"] " is not the better of start/end"; bad = 1 }
      if ($col["attn_version"] == "" || $col["date"] !~ /^20[0-9][0-9]-[01][0-9]-[0-3][0-9]T/) { print "version or date missing"; bad = 1 }
      if ($col["blas_threading"] !~ /^(pthread|openmp|serial|unknown)$/) { print "blas_threading " $col["blas_threading"]; bad = 1 }
      share = att / (lin + att)
      if ($col["attn_share"] - share > 1e-6 || share - $col["attn_share"] > 1e-6) { print "attn_share wrong"; bad = 1 }
    }
    END { if (seen != rows) { print seen " rows, want " rows; bad = 1 }; exit bad }' "$1" >"$tmp/err"
}

run() { # csv, then attn-bench arguments
  out="$1"; shift
  "$bench" --threads 1 --reps 1 --warmup 0 --csv "$out" "$@" >"$tmp/out" 2>"$tmp/err"
}

if run "$tmp/a.csv" --d 32 --heads 2 --n 8,16,32 --json "$tmp/a.json" &&
   cp "$tmp/err" "$tmp/a.err"; then
  ok "attn-bench --d 32 --heads 2 --n 8,16,32 runs"
else
  not_ok "attn-bench --d 32 --heads 2 --n 8,16,32 runs"
fi
check "CSV header has the documented columns" test "$(head -n 1 "$tmp/a.csv")" = "$expected"
check "CSV n column is 8, 16, 32" test "$(cut -d, -f10 "$tmp/a.csv" | tail -n +2 | tr '\n' ' ')" = "8 16 32 "
check "analytic MACs/FLOPs (F = 4d) match the formulas" verify "$tmp/a.csv" 32 2 128 1 0 3
check "JSON written with its runs" grep -q '"runs"' "$tmp/a.json"
check "stdout has the analytic table and a crossover line" \
  sh -c "grep -q 'attn share' '$tmp/out' && grep -q '^Crossover: theory 6d = 192' '$tmp/out'"

check "JSON records the environment (BLAS, kernel, CPU, variables, date)" \
  sh -c "grep -q '\"blas_corename\"' '$tmp/a.json' && grep -q '\"cpu\"' '$tmp/a.json' && grep -q '\"date\"' '$tmp/a.json'"
check "header names the BLAS and the CPU" sh -c "grep -q 'BLAS: ' '$tmp/out' && grep -q 'CPU: ' '$tmp/out'"
check "stderr not a terminal: one progress line per finished n" \
  test "$(grep -c ' done: linear ' "$tmp/a.err")" -eq 3
check "by default the run leaves the wait settings alone" grep -q 'tuned_env": false' "$tmp/a.json"
env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT "$bench" --threads 1 --reps 1 --warmup 0 \
  --n 8 --d 32 --heads 2 --tuned-env >"$tmp/out" 2>"$tmp/err"
check "--tuned-env sets OMP_WAIT_POLICY and OPENBLAS_THREAD_TIMEOUT" \
  sh -c "grep -q 'OMP_WAIT_POLICY=PASSIVE' '$tmp/out' && grep -q 'OPENBLAS_THREAD_TIMEOUT=4' '$tmp/out'"
check "--version names attn's version" sh -c "'$bench' --version | grep -q '^attn-bench (attn [0-9]'"

run "$tmp/b.csv" --d 32 --heads 4 --ff 48 --batch 2 --causal --nmin 8 --nmax 32 --dtype f64 --algo tiled
check "causal, batch 2, F 48, f64, --nmin/--nmax: MACs match the formulas" verify "$tmp/b.csv" 32 4 48 2 1 3
run "$tmp/c.csv" --d 16 --heads 2 --n 12 --algo materialized
check "materialized algorithm runs and counts right" verify "$tmp/c.csv" 16 2 64 1 0 1

# --- --window W: the window's columns appended after the others, recomputed here ---
wexpected="$expected,window"
for k in macs flops; do
  for p in attn mha block; do wexpected="$wexpected,win_${p}_$k"; done
done
wexpected="$wexpected,win_attn_share"
for p in attn mha block; do
  wexpected="$wexpected,win_${p}_ms_median,win_${p}_ms_min,win_${p}_ms_max"
done
for k in gflops frac_gemm ws_bytes; do
  for p in attn mha block; do wexpected="$wexpected,win_${p}_$k"; done
done
wexpected="$wexpected,win_theory_crossover,win_measured_crossover,win_crossover_kind"

# The window's attention: query i sees min(i + 1, W) keys, summed here pair by pair, less
# half the diagonal as the causal count n^2 d leaves it out: B 2 d (pairs - min(n, W) / 2).
# Theory: 2 (2d + F) once W reaches it, W^2 / (2 (W - 2d - F)) for W > 2d + F, else none.
verify_window() { # csv, d, ff, batch, W, rows
  awk -F, -v d="$2" -v f="$3" -v b="$4" -v W="$5" -v rows="$6" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
      n = $col["n"]; seen++
      pairs = 0; for (i = 0; i < n; i++) pairs += (i + 1 < W ? i + 1 : W)
      w = n < W ? n : W
      att = b * 2 * d * (pairs - w / 2)
      lin = b * (4 * n * d * d + 2 * n * d * f)
      want["attn"] = att; want["mha"] = b * 4 * n * d * d + att; want["block"] = lin + att
      if ($col["window"] != W || $col["causal"] != 1) { print "window or causal column wrong"; bad = 1 }
      if (n <= W && $col["win_attn_macs"] != $col["attn_macs"]) { print "n " n " <= W: window count differs from causal"; bad = 1 }
      for (p in want) {
        c = "win_" p
        if ($col[c "_macs"] != want[p]) { print "n " n ": " c "_macs " $col[c "_macs"] " != " want[p]; bad = 1 }
        if ($col[c "_flops"] != 2 * want[p]) { print "n " n ": " c "_flops wrong"; bad = 1 }
        if (!($col[c "_ms_median"] > 0) || $col[c "_ms_min"] > $col[c "_ms_median"] ||
            $col[c "_ms_median"] > $col[c "_ms_max"]) { print "n " n ": " c " times not ordered"; bad = 1 }
        if (!($col[c "_gflops"] > 0) || !($col[c "_frac_gemm"] > 0)) { print "n " n ": " c " rates not positive"; bad = 1 }
        if (!($col[c "_ws_bytes"] > 0)) { print "n " n ": " c "_ws_bytes not positive"; bad = 1 }
      }
      share = att / (lin + att)
      if ($col["win_attn_share"] - share > 1e-6 || share - $col["win_attn_share"] > 1e-6) { print "win_attn_share wrong"; bad = 1 }
      l = 2 * d + f
      theory = W >= 2 * l ? 2 * l : W > l ? W * W / (2 * (W - l)) : ""
      got = $col["win_theory_crossover"]
      if (theory == "" ? got != "" : (got == "" || got - theory > 0.05 || theory - got > 0.05)) { print "win_theory_crossover " got ", want " theory; bad = 1 }
      kind = $col["win_crossover_kind"]
      if (kind !~ /^(interpolated|below-range|none)$/ ||  # never extrapolated
          (kind == "none") != ($col["win_measured_crossover"] == "")) { print "win crossover " $col["win_measured_crossover"] " " kind; bad = 1 }
    }
    END { if (seen != rows) { print seen " rows, want " rows; bad = 1 }; exit bad }' "$1" >"$tmp/err"
}

if run "$tmp/w.csv" --d 16 --heads 2 --ff 16 --window 64 --n 16,32,64,128,256 --json "$tmp/w.json"
then ok "attn-bench --window 64 runs"; else not_ok "attn-bench --window 64 runs"; fi
check "--window: CSV header is the documented columns, the window's appended" \
  test "$(head -n 1 "$tmp/w.csv")" = "$wexpected"
check "--window: the full causal columns still match the formulas" verify "$tmp/w.csv" 16 2 16 1 1 5
check "--window 64 (2d + F = 48): the window's columns match the formulas" \
  verify_window "$tmp/w.csv" 16 16 1 64 5
check "--window: stdout has the window's table and crossover (theory 128)" \
  sh -c "grep -q 'full/window' '$tmp/out' && grep -q '^Crossover with the window (W = 64): theory W^2/2(W-2d-F) = 128;' '$tmp/out'"
check "--window: JSON has the window and its parts" \
  sh -c "grep -q '\"window\": 64' '$tmp/w.json' && grep -q '\"win_attn\": {\"macs\"' '$tmp/w.json'"
run "$tmp/v.csv" --d 32 --heads 2 --batch 2 --dtype f64 --algo materialized --window 8 --n 8,16,32
check "--window 8 (2d + F = 192), batch 2, f64, materialized: columns match, no theory" \
  verify_window "$tmp/v.csv" 32 128 2 8 3
check "--window 8: stdout says its work never overtakes" \
  sh -c "grep -q '^Crossover with the window (W = 8): theory none' '$tmp/out' && grep -q 'never overtakes' '$tmp/out'"

# --- bad arguments: one line on stderr, exit status 2, never a crash ---
bad() { # description, then arguments
  d="$1"; shift
  "$bench" "$@" >/dev/null 2>"$tmp/err"; rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then ok "$d: exit 2, one line"
  else echo "# exit status $rc" >>"$tmp/err"; not_ok "$d"; fi
}
bad "unknown flag" --frobnicate
bad "n zero" --n 0
bad "n negative" --n 16,-4
bad "n not a number" --n 16,abc
bad "d zero" --d 0 --heads 1
bad "d negative" --d -8
bad "heads not dividing d" --d 32 --heads 5
bad "d not a multiple of 64 without --heads" --d 100
bad "dtype unknown" --dtype f16
bad "algo unknown" --algo fast
bad "missing value" --reps
bad "plot suffix" --plot out.pdf
bad "--quick with --d" --quick --d 128
bad "window zero" --window 0
bad "window negative" --window -4
bad "window not a number" --window 8x
bad "--quick with --window" --quick --window 64
bad "workspace that cannot be allocated" --threads 1 --d 1024 --heads 16 --ff 64 --n 4194304
bad "counts that overflow" --d 1048576 --heads 1 --n 1099511627776

echo "1..$n_tests"
exit $failed
