#!/usr/bin/env bash
# The registration-churn floor: how fast could a catalog write be at all on this machine?
#
# Builds praetor with bench/floors/catalog-writes-as-kv.patch applied (in a throw-away git
# worktree, so the tree you work in is untouched) and measures the churn rows for the real
# binary and the floor binary in one sitting with bench/ab.py. The patched server turns every
# catalog write — `/v1/catalog/register`, `/v1/catalog/deregister`, the service changes a
# server's own anti-entropy proposes, and the `Catalog.Register`/`Catalog.Deregister` calls of
# service changes a client agent sends — into a KV set of the write's raw bytes: no JSON decode, no
# catalog apply, no index or wake-up bookkeeping, but the same HTTP request, the same bytes
# through Raft and the WAL on three servers, and (via the agent) all of the agent's own work.
# Whatever the floor's ratio against KV PUT is, no implementation of the catalog can beat it.
#
#   bench/churn_floor.sh [--runs 7] [--duration 3] [--out results/churn-floor-<UTC>]
#
# REAL is the binary measured against the floor (default: the working tree's, built here);
# the floor is built from HEAD. Builds are bounded by BUILD_TIMEOUT_S (default 1800).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD_TIMEOUT_S="${BUILD_TIMEOUT_S:-1800}"
REAL="${REAL:-}"
PATCH="$ROOT/bench/floors/catalog-writes-as-kv.patch"
WORKTREE="$ROOT/target/churn-floor-src"
runs=7
duration=3
out="results/churn-floor-$(date -u +%Y%m%dT%H%M%SZ)"
while (($#)); do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "churn_floor.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ -z "$REAL" ]]; then
  echo "[churn_floor] building the real praetor from the working tree (release)"
  timeout "$BUILD_TIMEOUT_S" cargo build --release --bin praetor
  REAL="$ROOT/target/release/praetor"
fi
timeout "$BUILD_TIMEOUT_S" cargo build --release -p loadgen

echo "[churn_floor] building the floor from HEAD + $PATCH"
git worktree remove --force "$WORKTREE" 2>/dev/null || true
git worktree add --detach "$WORKTREE" HEAD >/dev/null
trap 'git worktree remove --force "$WORKTREE" 2>/dev/null || true' EXIT
git -C "$WORKTREE" apply "$PATCH"
# The floor builds in its own target directory (the real binary stays where it is), seeded
# with the real release build's artefacts so that only praetor itself recompiles.
if [[ ! -d "$ROOT/target/churn-floor/release" && -d "$ROOT/target/release" ]]; then
  mkdir -p "$ROOT/target/churn-floor"
  cp -a "$ROOT/target/release" "$ROOT/target/churn-floor/"
fi
CARGO_TARGET_DIR="$ROOT/target/churn-floor" timeout "$BUILD_TIMEOUT_S" \
  cargo build --release --bin praetor --manifest-path "$WORKTREE/Cargo.toml"

python3 bench/ab.py --before "$REAL" --after "$ROOT/target/churn-floor/release/praetor" \
  --loadgen "$ROOT/target/release/loadgen" --runs "$runs" --duration "$duration" \
  --only churn-vs-kv-put,churn-catalog-vs-kv-put --out "$out"
echo "[churn_floor] 'before' is the real praetor, 'after' the floor: $out"
