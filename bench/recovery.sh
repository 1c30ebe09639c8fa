#!/usr/bin/env bash
# Recovery figures for the Raft issue, on real processes:
#
#   1. restart: a single server holding KEYS keys (default 1,000,000) is killed with -9 and
#      restarted on its data dir; the figure is the time from process start to the first
#      successful read of the last key (snapshot load + log replay + election + serving).
#   2. snapshot install: a 3-server cluster holds STATE_BYTES (default 1 GiB) of KV values,
#      its log compacted past them; a fourth, empty server joins and must receive the whole
#      state by chunked InstallSnapshot. The figure is snapshot bytes / transfer time, where
#      the transfer runs from the new server's first contact with the leader to the moment
#      it logs the snapshot installed.
#
# Everything runs on 127.71.0.x with the release binaries, stops by PID, and cleans up.
#   bench/recovery.sh [restart|install|all]      (PRAETOR_BIN=path runs another praetor build)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
WHAT="${1:-all}"
KEYS="${KEYS:-1000000}"
STATE_BYTES="${STATE_BYTES:-1073741824}"
VALUE_BYTES="${VALUE_BYTES:-65536}"
PRAETOR="${PRAETOR_BIN:-$ROOT/target/release/praetor}"
MAKE="$ROOT/target/release/examples/make_snapshot"
LOADGEN="$ROOT/target/release/loadgen"
WORK="$(mktemp -d /tmp/praetor-recovery.XXXXXX)"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; done
  [ -n "${KEEP_WORK:-}" ] && echo "[recovery] kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Always through cargo (a no-op when fresh): a stale make_snapshot writes an archive in an
# older state format, which the server rightly refuses.
cargo build --release --bin praetor --example make_snapshot
[ -x "$LOADGEN" ] || cargo build --release -p loadgen

now_ms() { date +%s%3N; }

# start_server NAME IP DATA_DIR [extra args...]; sets LAST_PID
start_server() {
  local name=$1 ip=$2 dir=$3; shift 3
  mkdir -p "$dir"
  "$PRAETOR" agent -server -node "$name" -bind "$ip" -client "$ip" -data-dir "$dir" \
    -dns-port=-1 -log-level debug "$@" >"$dir.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_http URL TIMEOUT_S: polls until the URL answers 200
wait_http() {
  local url=$1 deadline=$(( $(date +%s) + $2 ))
  until curl -sf -o /dev/null "$url"; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "timed out waiting for $url" >&2; return 1; }
    sleep 0.01
  done
}

# Writes enough small entries that the leader snapshots and compacts past the state's
# entries (snapshot threshold 16,384 + trailing 10,240 entries).
push_log_forward() {
  local url=$1
  "$LOADGEN" kv-put --target "$url" --connections 32 --duration 4s --keys 512 --key bench/churn >/dev/null 2>&1
}

restart_figure() {
  local ip=127.71.0.1 dir="$WORK/r1"
  echo "[recovery] building a ${KEYS}-key snapshot archive"
  "$MAKE" "$KEYS" 32 "$WORK/keys.snap"
  start_server r1 "$ip" "$dir" -bootstrap
  local pid=$LAST_PID
  wait_http "http://$ip:8500/v1/kv/?keys&separator=/" 30
  "$PRAETOR" snapshot restore -http-addr "$ip:8500" "$WORK/keys.snap" >/dev/null
  push_log_forward "http://$ip:8500"
  local last
  last=$(printf 'bench/%08d' $((KEYS - 1)))
  wait_http "http://$ip:8500/v1/kv/$last" 30
  # Let the snapshot triggered by the churn finish before the crash.
  sleep 3
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  local snapshot_bytes
  snapshot_bytes=$(ls -l "$dir"/raft/snapshot-*.snap 2>/dev/null | awk '{s=$5} END {print s+0}')
  local t0; t0=$(now_ms)
  start_server r1 "$ip" "$dir" -bootstrap
  wait_http "http://$ip:8500/v1/kv/$last" 60
  local t1; t1=$(now_ms)
  echo "RESULT restart keys=$KEYS snapshot_file_bytes=$snapshot_bytes restart_to_serving_ms=$((t1 - t0))"
  kill -9 "$LAST_PID" 2>/dev/null || true
}

install_figure() {
  local keys=$(( STATE_BYTES / VALUE_BYTES ))
  echo "[recovery] building a $((STATE_BYTES >> 20)) MiB state ($keys keys x $VALUE_BYTES bytes)"
  "$MAKE" "$keys" "$VALUE_BYTES" "$WORK/state.snap"
  for i in 1 2 3; do
    start_server "s$i" "127.71.1.$i" "$WORK/s$i" -bootstrap-expect 3 -retry-join 127.71.1.1
  done
  wait_http "http://127.71.1.1:8500/v1/kv/?keys&separator=/" 60
  local leader
  leader=$(curl -s http://127.71.1.1:8500/v1/status/leader | tr -d '"' | cut -d: -f1)
  "$PRAETOR" snapshot restore -http-addr "$leader:8500" "$WORK/state.snap" >/dev/null
  push_log_forward "http://$leader:8500"
  push_log_forward "http://$leader:8500"
  sleep 5
  echo "[recovery] starting an empty fourth server"
  start_server s4 127.71.1.4 "$WORK/s4" -retry-join 127.71.1.1
  local last
  last=$(printf 'bench/%08d' $((keys - 1)))
  wait_http "http://127.71.1.4:8500/v1/kv/$last?stale" 300
  local log="$WORK/s4.log"
  local first installed
  first=$(grep -m1 "raft: role Follower in term .* leader Some" "$log" | cut -c1-23)
  installed=$(grep -m1 "installed snapshot at index" "$log" | cut -c1-23)
  if [ -z "$first" ] || [ -z "$installed" ]; then
    echo "RESULT install: the new server caught up without a snapshot install (log not compacted?)"
    return 1
  fi
  local bytes
  bytes=$(ls -l "$WORK"/s4/raft/snapshot-*.snap | awk '{print $5}' | sort -n | tail -1)
  python3 - "$first" "$installed" "$bytes" <<'PY'
import sys, datetime
parse = lambda t: datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%f")
first, installed, size = parse(sys.argv[1]), parse(sys.argv[2]), int(sys.argv[3])
seconds = (installed - first).total_seconds()
print(f"RESULT install snapshot_bytes={size} transfer_and_install_s={seconds:.3f} MB_per_s={size / seconds / 1e6:.1f}")
PY
}

case "$WHAT" in
  restart) restart_figure ;;
  install) install_figure ;;
  all) restart_figure; install_figure ;;
  *) echo "usage: $0 [restart|install|all]" >&2; exit 2 ;;
esac
