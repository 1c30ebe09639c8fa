#!/bin/bash
# Syscall counts per registration through the agent (issue #24): starts three servers of the
# given praetor binary on loopback addresses derived from this shell's pid, runs
# `loadgen catalog-churn --via agent` (64 connections, $DUR, default 4s) against the leader
# under `strace -c -f -p <leader>`, and prints the sync-related counts per operation.
# Counts, not timings: strace slows the agent, and the machine may be shared.
#
#   bench/churn_syscalls.sh <praetor binary> <label>     (LOADGEN=path overrides target/ci/loadgen)
set -u
BIN=$1; LABEL=$2
LG=${LOADGEN:-$(dirname "$0")/../target/ci/loadgen}
PIDN=$$
SECOND=$((100 + PIDN % 128)); THIRD=$(( (PIDN / 128) % 250 + 1 ))
IPS=(127.$SECOND.$THIRD.201 127.$SECOND.$THIRD.202 127.$SECOND.$THIRD.203)
D=$(mktemp -d -t "churn-syscalls-$LABEL-XXXX")
PIDS=()
for i in 0 1 2; do
  ip=${IPS[$i]}
  mkdir -p $D/s$i
  $BIN agent -server -bootstrap-expect 3 -node m$i-$ip -bind $ip -client $ip -data-dir $D/s$i \
    -retry-join ${IPS[0]} -retry-join ${IPS[1]} -retry-join ${IPS[2]} -dns-port=-1 > $D/s$i.log 2>&1 &
  PIDS+=($!)
done
cleanup() {
  for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; sleep 1
  for p in "${PIDS[@]}"; do kill -9 $p 2>/dev/null; done
  rm -rf "$D"
}
trap cleanup EXIT
LEADER=""
for t in $(seq 1 60); do
  l=$(curl -s -m 1 http://${IPS[0]}:8500/v1/status/leader | tr -d '"')
  if [ -n "$l" ]; then LEADER=${l%:*}; break; fi
  sleep 0.5
done
[ -z "$LEADER" ] && { echo "no leader"; exit 1; }
for i in 0 1 2; do [ ${IPS[$i]} = $LEADER ] && LP=${PIDS[$i]}; done
echo "leader $LEADER pid $LP"
sleep 1
timeout 60 strace -c -f -q -o $D/strace.txt -p $LP &
ST=$!
sleep 1
timeout 30 $LG catalog-churn --via agent --target http://$LEADER:8500 --connections 64 --threads 2 --duration ${DUR:-4s} --json > $D/loadgen.json 2> $D/loadgen.err
sleep 0.5
kill -INT $ST; wait $ST 2>/dev/null
python3 - "$D" <<'PY'
import json,sys,re
d=sys.argv[1]
try:
    j=json.load(open(d+"/loadgen.json"))
except Exception as e:
    print("loadgen json:", e, open(d+"/loadgen.err").read()[-500:]); sys.exit()
def find(o,k):
    if isinstance(o,dict):
        for kk,v in o.items():
            if kk==k: return v
            r=find(v,k)
            if r is not None: return r
    return None
ops=find(j,"ops")
print("ops", ops, "errors", find(j,"errors"))
counts={}
for line in open(d+"/strace.txt"):
    p=line.split()
    # "% time seconds usecs/call calls [errors] syscall"
    if len(p)>=5 and p[-1].isidentifier() and p[3].isdigit():
        counts[p[-1]]=int(p[3])
for k in ["syncfs","fdatasync","fsync","sync_file_range","rename","renameat","renameat2","unlink","unlinkat","openat","write","pwrite64","io_uring_enter","futex"]:
    if k in counts: print(f"{k:18} {counts[k]:>8}" + (f"  per op {counts[k]/ops:.2f}" if ops else ""))
PY
