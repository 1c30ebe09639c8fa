#!/usr/bin/env bash
# DNS throughput and latency of praetor against NSD 4.6.1 and the DNS floor, in one run, on
# loopback ports 18650-18699. Everything started here is stopped here, by PID.
#
#   bench/dns_compare.sh [ROUNDS] [SECONDS]     (defaults: 5 rounds of 5 s per measurement)
#
# Zone shape (the DNS rows of docs/benchmarks.md): three passing instances of `web`; A and SRV questions
# for web.service.consul. NSD serves the same answers from a static `consul.` zone: three A
# records, three SRV records with their targets' A records (praetor's answer with
# udp_answer_limit 3), and, as the first baselines measured it, a one-SRV name (`one.service`).
# Runs are interleaved (floor, NSD, praetor per round) and medians are reported with the
# ratios the DNS issue sets. Then: SRV for a service with 5,000 instances over TCP (p99), and
# open-loop load at twice praetor's measured saturation (p99 of answered queries).
#
# Needs: dnsperf, nsd, python3, curl; release builds of praetor and loadgen, whose `loadgen
# floor dns` is the floor (built here once if missing; set PRAETOR_BIN / LOADGEN_BIN to
# reuse others).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-5}
FLOOR_PORT=18650
NSD_PORT=18651
PRAETOR_DNS=18652
PRAETOR_HTTP=18653
PRAETOR_SERVER=18654
PRAETOR_SERF_LAN=18655
PRAETOR_SERF_WAN=18656
PRAETOR_BIN=${PRAETOR_BIN:-target/release/praetor}
LOADGEN_BIN=${LOADGEN_BIN:-target/release/loadgen}
WORK=$(mktemp -d /tmp/praetor-dns-bench.XXXXXX)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -f "$WORK/nsd.pid" ]; then kill "$(cat "$WORK/nsd.pid")" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$PRAETOR_BIN" ] || cargo build --release
[ -x "$LOADGEN_BIN" ] || cargo build --release -p loadgen

echo "machine: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared; re-run when load is low)"

# --- the DNS floor ------------------------------------------------------------------------
"$LOADGEN_BIN" floor dns --listen "127.0.0.1:$FLOOR_PORT" --threads 2 >/dev/null 2>&1 &
PIDS+=($!)

# --- NSD ----------------------------------------------------------------------------------
cat > "$WORK/consul.zone" <<'ZONE'
$ORIGIN consul.
$TTL 0
@                 IN SOA ns.consul. hostmaster.consul. 1 3600 600 86400 0
@                 IN NS  ns.consul.
ns                IN A   127.0.0.1
web.service       IN A   10.0.0.1
web.service       IN A   10.0.0.2
web.service       IN A   10.0.0.3
web.service       IN SRV 1 1 8080 node0.node.dc1.consul.
web.service       IN SRV 1 1 8080 node1.node.dc1.consul.
web.service       IN SRV 1 1 8080 node2.node.dc1.consul.
one.service       IN SRV 1 1 8080 node0.node.dc1.consul.
node0.node.dc1    IN A   10.0.0.1
node1.node.dc1    IN A   10.0.0.2
node2.node.dc1    IN A   10.0.0.3
ZONE
cat > "$WORK/nsd.conf" <<CONF
server:
  ip-address: 127.0.0.1
  port: $NSD_PORT
  server-count: 2
  username: ""
  chroot: ""
  zonesdir: "$WORK"
  database: ""
  zonelistfile: "$WORK/zone.list"
  xfrdfile: "$WORK/xfrd.state"
  xfrdir: "$WORK"
  pidfile: "$WORK/nsd.pid"
  logfile: "$WORK/nsd.log"
  rrl-ratelimit: 0
  verbosity: 0
remote-control:
  control-enable: no
zone:
  name: consul.
  zonefile: consul.zone
CONF
nsd -c "$WORK/nsd.conf" -d >/dev/null 2>&1 &
PIDS+=($!)

# --- praetor ------------------------------------------------------------------------------
"$PRAETOR_BIN" agent -dev -node bench -bind 127.0.0.1 -client 127.0.0.1 \
  -dns-port "$PRAETOR_DNS" -http-port "$PRAETOR_HTTP" -server-port "$PRAETOR_SERVER" \
  -serf-lan-port "$PRAETOR_SERF_LAN" -serf-wan-port "$PRAETOR_SERF_WAN" \
  -log-level warn -data-dir "$WORK/praetor" >"$WORK/praetor.log" 2>&1 &
PIDS+=($!)

for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PRAETOR_HTTP/v1/status/leader" | grep -q : && break
  sleep 0.1
done

# Registers instances through the catalog API over one keep-alive connection.
register() { # service count first_octet
  python3 - "$PRAETOR_HTTP" "$1" "$2" "$3" <<'PY'
import http.client, json, sys
port, service, count, octet = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
conn = http.client.HTTPConnection("127.0.0.1", port)
for i in range(count):
    body = json.dumps({"Node": f"{service}-node{i}", "Address": f"10.{octet}.{i // 250}.{i % 250 + 1}",
                       "Service": {"Service": service, "ID": f"{service}{i}", "Port": 8080}})
    conn.request("PUT", "/v1/catalog/register", body)
    response = conn.getresponse(); response.read()
    assert response.status == 200, (response.status, i)
PY
}
register web 3 0
register big 5000 1

wait_dns() { # port
  for _ in $(seq 100); do
    dig @127.0.0.1 -p "$1" +time=1 +tries=1 web.service.consul A +short | grep -q . && return 0
    sleep 0.1
  done
  echo "no DNS answer on port $1" >&2; exit 1
}
wait_dns "$FLOOR_PORT"; wait_dns "$NSD_PORT"; wait_dns "$PRAETOR_DNS"
echo "praetor A:   $(dig @127.0.0.1 -p $PRAETOR_DNS web.service.consul A +short | tr '\n' ' ')"
echo "praetor SRV: $(dig @127.0.0.1 -p $PRAETOR_DNS web.service.consul SRV +short | wc -l) SRV records"
echo "NSD SRV:     $(dig @127.0.0.1 -p $NSD_PORT web.service.consul SRV +short | wc -l) SRV records"

echo "web.service.consul A" > "$WORK/a.txt"
echo "web.service.consul SRV" > "$WORK/srv.txt"
echo "one.service.consul SRV" > "$WORK/one-srv.txt"
echo "big.service.consul SRV" > "$WORK/big-srv.txt"

qps() { # port file [extra dnsperf args...]
  local port=$1 file=$2; shift 2
  dnsperf -s 127.0.0.1 -p "$port" -d "$file" -l "$SECONDS_PER_RUN" -c 4 -T 1 "$@" 2>/dev/null |
    awk '/Queries per second/ {print $4}'
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

declare -A RESULTS
for round in $(seq "$ROUNDS"); do
  for target in floor nsd praetor; do
    case $target in
      floor) port=$FLOOR_PORT ;;
      nsd) port=$NSD_PORT ;;
      praetor) port=$PRAETOR_DNS ;;
    esac
    RESULTS[$target-a]+="$(qps "$port" "$WORK/a.txt") "
    if [ "$target" != floor ]; then
      RESULTS[$target-srv]+="$(qps "$port" "$WORK/srv.txt") "
    fi
  done
  RESULTS[nsd-one-srv]+="$(qps "$NSD_PORT" "$WORK/one-srv.txt") "
  echo "round $round done ($(cut -d' ' -f1 /proc/loadavg) load)" >&2
done

m() { echo "${RESULTS[$1]}" | tr ' ' '\n' | grep . | median; }
FLOOR_A=$(m floor-a); NSD_A=$(m nsd-a); NSD_SRV=$(m nsd-srv); NSD_ONE=$(m nsd-one-srv)
P_A=$(m praetor-a); P_SRV=$(m praetor-srv)
echo
echo "medians of $ROUNDS interleaved runs of ${SECONDS_PER_RUN}s (dnsperf -c 4 -T 1, UDP, no EDNS), qps:"
for key in floor-a nsd-a nsd-srv nsd-one-srv praetor-a praetor-srv; do
  printf "  %-12s median %8.0f   runs: %s\n" "$key" "$(m $key)" "${RESULTS[$key]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "ratios:"
echo "  praetor A   / NSD A            = $(ratio "$P_A" "$NSD_A")   (target >= 1.0)"
echo "  praetor SRV / NSD SRV (3 SRV)  = $(ratio "$P_SRV" "$NSD_SRV")   (target >= 1.0)"
echo "  praetor SRV / NSD SRV (1 SRV)  = $(ratio "$P_SRV" "$NSD_ONE")   (the first baselines' shape)"
echo "  praetor A   / floor            = $(ratio "$P_A" "$FLOOR_A")   (target >= 0.8)"
echo "  praetor SRV / floor            = $(ratio "$P_SRV" "$FLOOR_A")   (target >= 0.8)"

# Latency percentiles from dnsperf -v output (one line per answered query, latency last).
p99() { awk '$1 == ">" && $2 == "NOERROR" {print $NF}' | sort -g |
  awk '{v[NR]=$1} END {if (NR == 0) {print "n/a"; exit} i = int(NR * 0.99); if (i < 1) i = 1; printf "%.2f ms (p50 %.2f ms, %d answered)", v[i] * 1000, v[int(NR / 2) + 1] * 1000, NR}'; }

echo
echo "SRV for a service with 5,000 instances over TCP (4 concurrent kdig clients x 100 queries on kept-open connections; kdig's own timing):"
# dnsperf cannot read TCP replies this large (~64 KB), so kdig measures each exchange; one
# kdig process sends its 100 queries over one connection (+keepopen), so process start-up
# stays out of the figures.
BIG_QUERIES=$(for _ in $(seq 100); do printf 'big.service.consul SRV '; done)
for loop in 1 2 3 4; do
  # shellcheck disable=SC2086
  ( kdig @127.0.0.1 -p "$PRAETOR_DNS" +tcp +keepopen +noall +stats $BIG_QUERIES |
      awk '/^;; From/ {for (i = 1; i <= NF; i++) if ($i == "in") print $(i + 1) / 1000}' ) >"$WORK/big-$loop.txt" &
  PIDS+=($!)
done
wait "${PIDS[@]: -4}"
cat "$WORK"/big-*.txt | awk '{print "> NOERROR big SRV", $1}' > "$WORK/big.txt"
echo "  p99 $(p99 < "$WORK/big.txt")   (target p99 <= 10 ms)"
echo "  answers per response: $(dig @127.0.0.1 -p $PRAETOR_DNS +tcp big.service.consul SRV +short | wc -l)"

echo
OFFERED=$(awk -v q="$P_A" 'BEGIN {printf "%d", q * 2}')
echo "open loop at 2x saturation: offered $OFFERED qps of A for ${SECONDS_PER_RUN}s (dnsperf -Q, -q 20000, -t 1):"
dnsperf -s 127.0.0.1 -p "$PRAETOR_DNS" -d "$WORK/a.txt" -l "$SECONDS_PER_RUN" -c 4 -T 1 \
  -Q "$OFFERED" -q 20000 -t 1 -v 2>/dev/null >"$WORK/overload.txt" || true
echo "  p99 of answered $(p99 < "$WORK/overload.txt")   (target p99 <= 20 ms)"
echo "  $(grep -E 'Queries (completed|lost)' "$WORK/overload.txt" | tr -s ' ' | tr '\n' ' ')"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
