#!/usr/bin/env bash
# Session and transaction benchmarks on three praetor servers (release build), as ratios
# against KV PUT measured interleaved in the same run:
#   1. session create + acquire + release + destroy cycles/s  vs  KV PUT/s   (64 connections)
#   2. one 64-op /v1/txn vs 64 single PUTs: keys written per second (64 connections) and
#      mean latency on one connection.
# Load goes to the leader. Servers listen on 127.42.0.11-13 (override with SESSIONS_BENCH_IPS),
# data in a temporary directory that is removed at the end; every process started here is
# stopped by PID.
#
# Usage: bench/sessions.sh [--no-build] [--runs N] [--duration D]
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
runs=5
duration=5s
while (($#)); do
  case "$1" in
    --no-build) build=0 ;;
    --runs) runs="$2"; shift ;;
    --duration) duration="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if ((build)); then
  cargo build --release -p praetor -p loadgen
fi
praetor=target/release/praetor
loadgen=target/release/loadgen

read -r -a ips <<<"${SESSIONS_BENCH_IPS:-127.42.0.11 127.42.0.12 127.42.0.13}"
data=$(mktemp -d /tmp/praetor-sessions-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$data"
}
trap cleanup EXIT INT TERM

for i in 0 1 2; do
  ip=${ips[$i]}
  "$praetor" agent -server -bootstrap-expect 3 -node "bench-s$i" -bind "$ip" -client "$ip" \
    -data-dir "$data/s$i" -retry-join "${ips[0]}" -dns-port=-1 >"$data/s$i.log" 2>&1 &
  pids+=($!)
done

# The leader: the server every server names, once it answers a leader read.
leader=""
for _ in $(seq 1 300); do
  named=$(curl -sf --max-time 2 "http://${ips[0]}:8500/v1/status/leader" | tr -d '"' || true)
  if [[ -n "$named" ]]; then
    candidate=${named%:*}
    if curl -s --max-time 2 -o /dev/null -w '%{http_code}' \
        "http://$candidate:8500/v1/kv/__probe" | grep -q 404; then
      leader=$candidate
      break
    fi
  fi
  sleep 0.1
done
[[ -n "$leader" ]] || { echo "no leader within 30 s" >&2; tail -n 20 "$data"/s*.log >&2; exit 1; }
# Sessions bind the node's serfHealth by default: wait until the leader's own node has it.
for _ in $(seq 1 300); do
  node=$(curl -sf "http://$leader:8500/v1/agent/self" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Config"]["NodeName"])')
  if curl -sf "http://$leader:8500/v1/health/node/$node" | grep -q '"serfHealth"'; then break; fi
  sleep 0.1
done
target="http://$leader:8500"
echo "leader: $target; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

common=(--target "$target" --threads 2 --duration "$duration" --runs "$runs" --pause 500ms)

echo "== session cycles vs KV PUT (64 connections; metric ops_per_s: cycles vs PUTs)"
"$loadgen" compare --scenario-a kv-put --scenario-b session-locks --name-a "KV PUT" \
  --name-b "session cycle" --key bench/put --lock-key bench/lock --connections 64 \
  --metric ops_per_s "${common[@]}"

echo "== 64-op txn vs single PUTs (64 connections; ops_per_s: txns vs PUTs; keys/s = ×64)"
"$loadgen" compare --scenario-a kv-put --scenario-b txn --txn-ops 64 --name-a "KV PUT" \
  --name-b "txn of 64 sets" --key bench/txn --connections 64 --metric ops_per_s "${common[@]}"

echo "== 64-op txn vs single PUT, one connection (mean latency)"
"$loadgen" compare --scenario-a kv-put --scenario-b txn --txn-ops 64 --name-a "KV PUT" \
  --name-b "txn of 64 sets" --key bench/txn1 --connections 1 --metric mean_ms \
  --target "$target" --threads 1 --duration "$duration" --runs "$runs" --pause 500ms

echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
