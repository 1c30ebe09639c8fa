#!/usr/bin/env bash
# Memory during snapshots (issue #19), on a 3-server cluster of real processes holding KEYS
# KV keys (default 1,000,000 × 100 B, loaded 64 per transaction by bench/kv_load.py):
#
#   1. save: VmRSS of the leader sampled every 50 ms while `praetor snapshot save` runs,
#      against its steady RSS before;
#   2. install: one follower is stopped, its data directory wiped and it is started again
#      empty; the leader (whose log was compacted past the load) sends it the whole state
#      by InstallSnapshot. Its VmRSS is sampled every 50 ms from start until it serves the
#      last key, against the steady RSS the same follower had before it was wiped.
#
# Targets: both peaks within +10% of steady state. RSS is not a timing figure: a loaded
# machine changes it little. Everything runs on 127.72.0.x, stops by PID, and cleans up.
#   bench/snapshot_rss.sh            (PRAETOR_BIN=path, KEYS=n, VALUE_BYTES=n to change)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
KEYS="${KEYS:-1000000}"
VALUE_BYTES="${VALUE_BYTES:-100}"
PRAETOR="${PRAETOR_BIN:-$ROOT/target/release/praetor}"
WORK="$(mktemp -d /tmp/praetor-snapshot-rss.XXXXXX)"
PIDS=()
SAMPLER=""

cleanup() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null || true
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; done
  [ -n "${KEEP_WORK:-}" ] && echo "[snapshot-rss] kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

[ -x "$PRAETOR" ] || { echo "no praetor binary at $PRAETOR (set PRAETOR_BIN)" >&2; exit 2; }

# Snapshots every 1,024 applied entries, 128 kept below: the load (15,625 transactions of
# 64 keys at 1M keys) is compacted away, so a wiped follower must take a snapshot.
cat >"$WORK/raft.hcl" <<'EOF'
raft_snapshot_threshold = 1024
raft_trailing_logs = 128
EOF

# start_server N; sets LAST_PID
start_server() {
  local n=$1 ip="127.72.0.$1" dir="$WORK/s$1"
  mkdir -p "$dir"
  "$PRAETOR" agent -server -node "s$n" -bind "$ip" -client "$ip" -data-dir "$dir" \
    -dns-port=-1 -bootstrap-expect 3 -retry-join 127.72.0.1 -config-file "$WORK/raft.hcl" \
    >>"$dir.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

wait_http() {
  local url=$1 deadline=$(( $(date +%s) + $2 ))
  until curl -sf -o /dev/null "$url"; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "timed out waiting for $url" >&2; return 1; }
    sleep 0.05
  done
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# sample PID FILE: VmRSS every 50 ms until killed
sample() {
  while [ -e "/proc/$1" ]; do rss_kib "$1" >>"$2" 2>/dev/null || true; sleep 0.05; done
}

peak_kib() { sort -n "$1" | tail -1; }

declare -A PID_OF
for n in 1 2 3; do start_server "$n"; PID_OF[$n]=$LAST_PID; done
wait_http "http://127.72.0.1:8500/v1/kv/?keys" 60
leader_ip=""
for _ in $(seq 1 200); do
  leader_ip=$(curl -s http://127.72.0.1:8500/v1/status/leader | tr -d '"' | cut -d: -f1)
  [ -n "$leader_ip" ] && break
  sleep 0.1
done
leader=${leader_ip##*.}
follower=$(( leader % 3 + 1 ))
echo "[snapshot-rss] leader s$leader, measured follower s$follower; loading $KEYS × $VALUE_BYTES B"
python3 bench/kv_load.py --system praetor --url "http://$leader_ip:8500" --pid "${PID_OF[$leader]}" \
  --keys "$KEYS" --value-bytes "$VALUE_BYTES" >"$WORK/load.json"
last=$(printf 'load/%012d' $((KEYS - 1)))
wait_http "http://127.72.0.$follower:8500/v1/kv/$last?stale" 120
sleep 5

echo "[snapshot-rss] steady VmRSS (KiB): s1=$(rss_kib "${PID_OF[1]}") s2=$(rss_kib "${PID_OF[2]}")" \
  "s3=$(rss_kib "${PID_OF[3]}") (pids ${PID_OF[1]} ${PID_OF[2]} ${PID_OF[3]})"

# 1. save
steady_leader=$(rss_kib "${PID_OF[$leader]}")
sample "${PID_OF[$leader]}" "$WORK/save.rss" & SAMPLER=$!
"$PRAETOR" snapshot save -http-addr "$leader_ip:8500" "$WORK/saved.snap" >/dev/null
sleep 1
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""
save_peak=$(peak_kib "$WORK/save.rss")
echo "RESULT save keys=$KEYS steady_kib=$steady_leader peak_kib=$save_peak" \
  "growth_pct=$(( (save_peak - steady_leader) * 100 / steady_leader ))" \
  "archive_bytes=$(stat -c %s "$WORK/saved.snap")"

# 2. install on a wiped follower
steady_follower=$(rss_kib "${PID_OF[$follower]}")
kill "${PID_OF[$follower]}"; wait "${PID_OF[$follower]}" 2>/dev/null || true
rm -rf "$WORK/s$follower"
start_server "$follower"; PID_OF[$follower]=$LAST_PID
sample "$LAST_PID" "$WORK/install.rss" & SAMPLER=$!
wait_http "http://127.72.0.$follower:8500/v1/kv/$last?stale" 600
sleep 3
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""
if ! grep -q "installed snapshot at index" "$WORK/s$follower.log"; then
  echo "RESULT install: the wiped follower caught up without a snapshot (log not compacted?)"
  exit 1
fi
install_peak=$(peak_kib "$WORK/install.rss")
after=$(rss_kib "${PID_OF[$follower]}")
snapshot_bytes=$(ls -l "$WORK/s$follower"/raft/snapshot-*.snap | awk '{print $5}' | sort -n | tail -1)
echo "RESULT install keys=$KEYS steady_before_wipe_kib=$steady_follower peak_kib=$install_peak" \
  "after_kib=$after growth_pct=$(( (install_peak - steady_follower) * 100 / steady_follower ))" \
  "snapshot_bytes=$snapshot_bytes"
