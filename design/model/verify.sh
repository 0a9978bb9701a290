#!/usr/bin/env bash
# Verify one configuration of claims.pml with Spin, exhaustively, in a scratch folder.
#
#   verify.sh safety|liveness clean|counterexample [-DSWITCH ...]
#
# safety:   spin -a, gcc -DSAFETY, ./pan (assertions and invalid end states, every reachable state)
# liveness: spin -a with the LTL property, gcc -DNFAIR=3, ./pan -a -f (acceptance cycles under weak
#           fairness)
# It prints Spin's figures and exits 0 when the outcome is the expected one: "clean" (no error) or
# "counterexample" (Spin reports an error and writes a trail).
set -euo pipefail
mode=$1 expect=$2
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/claims.pml" "$work/"
cd "$work"
defines=("$@")
if [ "$mode" = liveness ]; then
  defines+=(-DLIVENESS)
fi
spin "${defines[@]}" -a claims.pml >spin.out || { cat spin.out; exit 2; }
if [ "$mode" = liveness ]; then
  gcc -O2 -w -DNFAIR=3 "${defines[@]}" -o pan pan.c
  flags=(-a -f -m200000)
else
  gcc -O2 -w -DSAFETY "${defines[@]}" -o pan pan.c
  flags=(-m200000)
fi
start=$(date +%s.%N)
./pan "${flags[@]}" >pan.out 2>&1 || true
end=$(date +%s.%N)
errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out)
echo "== $mode ${*:-(the model)}: errors ${errors:-?}, expected $expect"
grep -E "violated|acceptance cycle \(|invalid end state \(|states, stored|transitions \(|depth reached|total actual memory|Search not completed|max search depth too small" pan.out || true
awk -v s="$start" -v e="$end" 'BEGIN { printf "time %.2f s\n", e - s }'
if grep -q "max search depth too small\|Search not completed" pan.out && [ "${errors:-1}" = 0 ]; then
  echo "the search was cut short: not exhaustive"; exit 1
fi
if [ -f claims.pml.trail ]; then
  # The counterexample, step by step, for whoever reads the log.
  spin "${defines[@]}" -t -p -g claims.pml 2>&1 | grep -E "^\s+[0-9]+:\s+proc|violated|CYCLE" | tail -40 > trail.txt || true
fi
case "$expect" in
  clean) [ "${errors:-1}" = 0 ] || { cat trail.txt 2>/dev/null; exit 1; } ;;
  counterexample) [ "${errors:-0}" != 0 ] && [ -f claims.pml.trail ] ;;
  *) echo "expect clean or counterexample"; exit 2 ;;
esac
