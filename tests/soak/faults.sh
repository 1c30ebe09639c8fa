#!/usr/bin/env bash
# The fault-injection soak behind issue #37's figures: for each variant (3 servers plain,
# 3 servers TLS + ACL, 5 servers plain, 5 servers TLS + ACL) one run of
# tests/linearizability.rs's `soak` test — kill -9, SIGSTOP and iptables partitions, one
# fault every 5-10 s — for SOAK_SECONDS seconds (default 120), then one table of the figures.
#
#   tests/soak/faults.sh [variant ...]     variants: 3 3-secure 5 5-secure (default: all)
#   SOAK_SECONDS=120 SEED=<n> KEEP_LOGS=1 tests/soak/faults.sh 3
#   SOAK_PROFILE=dev tests/soak/faults.sh 3   (the debug build, when the ci one is not built)
#
# Runs as root (iptables), one cluster at a time, each bounded by the test's own deadlines
# and by `timeout`. Every run's JSON line lands in $OUT (default target/soak-faults.jsonl).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
DURATION="${SOAK_SECONDS:-120}"
PROFILE="${SOAK_PROFILE:-ci}"
OUT="${OUT:-$ROOT/target/soak-faults.jsonl}"
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(3 3-secure 5 5-secure)
command -v iptables >/dev/null || { echo "faults.sh: iptables is needed" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "faults.sh: run as root (iptables partitions)" >&2; exit 1; }

nice -n 10 cargo test --profile "$PROFILE" --test linearizability --no-run
: > "$OUT.run"
for variant in "${VARIANTS[@]}"; do
  servers="${variant%%-*}"
  secure=0; [ "$variant" = "${servers}-secure" ] && secure=1
  seed="${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
  logs=""
  [ -n "${KEEP_LOGS:-}" ] && logs="$ROOT/target/soak-logs/$variant-$seed"
  echo "== $variant: $DURATION s of faults, seed $seed, $PROFILE build, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  # Fault phase + start, settle and the checker's search: bounded well above the run.
  if ! FAULTS_SERVERS="$servers" FAULTS_SECURE="$secure" LINEARIZABILITY_SECONDS="$DURATION" \
      LINEARIZABILITY_SEED="$seed" FAULTS_FIGURES="$OUT.run" FAULTS_KEEP_LOGS="$logs" \
      timeout $((DURATION * 4 + 600)) \
      nice -n 10 cargo test --profile "$PROFILE" --test linearizability soak -- --ignored --exact --nocapture \
      2>&1 | grep -E '^faults:|panicked|test result'; then
    echo "== $variant: FAILED (seed $seed)"
  fi
done
cat "$OUT.run" >> "$OUT"
python3 - "$OUT.run" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
head = ("variant", "seconds", "faults", "of leader", "ops", "acked", "violations", "lost",
        "voters min", "availability (ops)", "availability (windows)", "0% windows",
        "by followers", "longest 0% run", "leader faults: new leader after (max)",
        "windows in followers' faults")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for r in rows:
    print("| " + " | ".join(str(x) for x in (
        r["scenario"], r["seconds"], r["faults"], r["leader_faults"], r["operations"],
        r["acknowledged_writes"], r["violations"], f'{r["lost"]} of {r["inserts"]}',
        f'{r["voters_min"]} of {r["servers"]}', f'{100 * r["availability"]:.1f}%',
        f'{100 * r["window_availability"]:.1f}%',
        r["zero_windows"], r["zero_windows_by_follower_faults"],
        f'{r["longest_outage_s"]} s', f'{r["election_max_s"]:.2f} s',
        "-" if r["follower_fault_window_availability"] is None
        else f'{100 * r["follower_fault_window_availability"]:.1f}%')) + " |")
PY
