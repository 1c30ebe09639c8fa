#!/usr/bin/env python3
"""Which HTTP requests still reach a server as forwarded HTTP (issue #36's instrument).

Starts a dc1 server, a dc2 server WAN-joined to it and a dc1 client agent on
<prefix>.1/.2/.3, makes 79 requests of every family three ways (on the client agent, on
dc1's server with ?dc=dc2, on the client agent with ?dc=dc2), and prints each request that
moved any server's `consul_rpc_forwarded_http` counter. Every process it starts it kills.

Usage: bench/forwarded_http_survey.py <praetor binary> [<ip prefix, default 127.0.77>] [<path prefix>]
"""
import subprocess, time, json, urllib.request, sys, os, tempfile, shutil
BIN = sys.argv[1]
PROM = 'telemetry { prometheus_retention_time = "1m" }'
procs = []
def agent(ip, args):
    d = tempfile.mkdtemp(prefix="survey")
    log = open(f"/tmp/survey-{ip}.log", "w")
    p = subprocess.Popen([BIN, "agent", "-bind", ip, "-client", ip, "-data-dir", d, "-node", "n-"+ip, "-hcl", PROM, "-dns-port", "-1"] + args, stdout=log, stderr=subprocess.STDOUT)
    procs.append(p); return p
PREFIX = sys.argv[2] if len(sys.argv) > 2 else "127.0.77"
S1, S2, C = PREFIX + ".1", PREFIX + ".2", PREFIX + ".3"
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""
def req(ip, method, path, body=None):
    r = urllib.request.Request(f"http://{ip}:8500{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(r, timeout=15) as resp: return resp.status, resp.read()
    except urllib.error.HTTPError as e: return e.code, e.read()
    except Exception as e: return -1, str(e).encode()
def counter(ip):
    s, b = req(ip, "GET", "/v1/agent/metrics?format=prometheus")
    for line in b.decode().splitlines():
        if line.startswith("consul_rpc_forwarded_http "): return float(line.split()[1])
    return 0.0
try:
    agent(S1, ["-server", "-bootstrap-expect", "1", "-datacenter", "dc1"])
    agent(S2, ["-server", "-bootstrap-expect", "1", "-datacenter", "dc2", "-retry-join-wan", S1])
    agent(C, ["-datacenter", "dc1", "-retry-join", S1])
    for _ in range(150):
        ok = all(req(ip, "GET", "/v1/status/leader")[0] == 200 and req(ip, "GET", "/v1/status/leader")[1] not in (b'""',) for ip in (S1, S2))
        dcs = req(S1, "GET", "/v1/catalog/datacenters")[1]
        if ok and b"dc2" in dcs and req(C, "GET", "/v1/kv/x")[0] in (200, 404): break
        time.sleep(0.2)
    time.sleep(1)
    # seed data in both DCs
    for ip in (S1, S2):
        req(ip, "PUT", "/v1/kv/seed", b"v")
        req(ip, "PUT", "/v1/agent/service/register", json.dumps({"Name": "web", "Port": 80, "Connect": {"SidecarService": {}}}).encode())
        req(ip, "PUT", "/v1/query", json.dumps({"Name": "q1", "Service": {"Service": "web"}}).encode())
    time.sleep(1)
    sid = {}
    for ip in (S1, S2):
        s, b = req(ip, "PUT", "/v1/session/create", b"{}"); sid[ip] = json.loads(b)["ID"] if s == 200 else "x"
    cases = [
        ("GET", "/v1/kv/seed"), ("PUT", "/v1/kv/k2", b"x"),
        ("GET", "/v1/catalog/nodes"), ("GET", "/v1/catalog/services"), ("GET", "/v1/catalog/services?filter=ServiceName%3D%3Dweb"),
        ("GET", "/v1/catalog/service/web"), ("GET", "/v1/catalog/connect/web"), ("GET", "/v1/catalog/service/web?near=_agent"),
        ("GET", "/v1/catalog/service/web?cached"),
        ("GET", "/v1/catalog/node/NODE"), ("GET", "/v1/catalog/node-services/NODE"),
        ("PUT", "/v1/catalog/register", b'{"Node":"ext1","Address":"1.2.3.4","Service":{"Service":"ext"}}'),
        ("PUT", "/v1/catalog/deregister", b'{"Node":"ext1"}'),
        ("GET", "/v1/health/service/web"), ("GET", "/v1/health/connect/web"), ("GET", "/v1/health/ingress/web"),
        ("GET", "/v1/catalog/gateway-services/gw"), ("GET", "/v1/health/checks/web"), ("GET", "/v1/health/checks/web?tag=x"),
        ("GET", "/v1/health/node/NODE"), ("GET", "/v1/health/state/any"), ("GET", "/v1/health/state/passing"),
        ("PUT", "/v1/event/fire/ev1", b""),
        ("GET", "/v1/coordinate/node/NODE"), ("GET", "/v1/coordinate/nodes"), ("GET", "/v1/coordinate/datacenters"),
        ("PUT", "/v1/session/create", b"{}"), ("GET", "/v1/session/list"), ("GET", "/v1/session/node/NODE"),
        ("GET", "/v1/session/info/SID"), ("PUT", "/v1/session/renew/SID", b""), ("PUT", "/v1/session/destroy/SID2", b""),
        ("PUT", "/v1/txn", b'[{"KV":{"Verb":"get","Key":"seed"}}]'), ("PUT", "/v1/txn", b'[{"KV":{"Verb":"set","Key":"t1","Value":"eA=="}}]'),
        ("GET", "/v1/query"), ("POST", "/v1/query", b'{"Name":"q2","Service":{"Service":"web"}}'),
        ("GET", "/v1/query/q1/execute"), ("GET", "/v1/query/q1/explain"),
        ("GET", "/v1/status/leader"), ("GET", "/v1/status/peers"),
        ("GET", "/v1/operator/raft/configuration"), ("GET", "/v1/operator/autopilot/health"), ("GET", "/v1/operator/autopilot/state"),
        ("GET", "/v1/operator/autopilot/configuration"), ("PUT", "/v1/operator/autopilot/configuration", b'{"CleanupDeadServers":true}'),
        ("GET", "/v1/operator/usage"), ("GET", "/v1/operator/keyring"),
        ("GET", "/v1/snapshot"),
        ("GET", "/v1/internal/ui/services"), ("GET", "/v1/internal/ui/nodes"), ("GET", "/v1/internal/ui/node/NODE"),
        ("GET", "/v1/internal/ui/service-topology/web"), ("GET", "/v1/internal/ui/gateway-services-nodes/gw"), ("GET", "/v1/internal/ui/metrics-proxy/"),
        ("GET", "/v1/internal/ui/service-topology/web?kind="), ("GET", "/v1/internal/ui/service-topology/web?kind=ingress-gateway"),
        ("GET", "/v1/internal/ui/services?filter=Service.Service%3D%3Dweb"), ("GET", "/v1/catalog/nodes?near=_agent"),
        ("PUT", "/v1/coordinate/update", b'{"Node":"NODE","Coord":{"Vec":[0,0,0,0,0,0,0,0],"Error":1.5,"Adjustment":0,"Height":0.00001}}'),
        ("GET", "/v1/internal/federation-states"), ("GET", "/v1/internal/federation-states/mesh-gateways"), ("GET", "/v1/internal/federation-state/dc1"),
        ("GET", "/v1/acl/replication"), ("GET", "/v1/acl/tokens"),
        ("PUT", "/v1/config", b'{"Kind":"service-defaults","Name":"web","Protocol":"http"}'),
        ("GET", "/v1/config/service-defaults"), ("GET", "/v1/config/service-defaults/web"), ("DELETE", "/v1/config/service-defaults/web"),
        ("POST", "/v1/connect/intentions", b'{"SourceName":"a","DestinationName":"web","Action":"allow"}'),
        ("PUT", "/v1/connect/intentions/exact?source=b&destination=web", b'{"Action":"deny"}'),
        ("GET", "/v1/connect/intentions"), ("GET", "/v1/connect/intentions/exact?source=b&destination=web"),
        ("GET", "/v1/connect/intentions/match?by=destination&name=web"), ("GET", "/v1/connect/intentions/check?source=a&destination=web"),
        ("DELETE", "/v1/connect/intentions/exact?source=b&destination=web"),
        ("GET", "/v1/connect/ca/roots"), ("GET", "/v1/connect/ca/configuration"),
        ("GET", "/v1/peerings"), ("GET", "/v1/peering/p1"), ("GET", "/v1/exported-services"),
        ("GET", "/v1/discovery-chain/web"), ("POST", "/v1/discovery-chain/web", b'{}'),
        ("GET", "/v1/agent/connect/ca/leaf/web"), ("POST", "/v1/agent/connect/authorize", b'{"Target":"web","ClientCertURI":"spiffe://x.consul/ns/default/dc/dc1/svc/a"}'),
    ]
    def run(where, ip, suffix, nodes):
        bad = []
        for case in cases:
            if ONLY and not case[1].startswith(ONLY): continue
            m, p = case[0], case[1]; body = case[2] if len(case) > 2 else None
            p = p.replace("NODE", nodes).replace("SID2", "00000000-0000-0000-0000-000000000000").replace("SID", sid.get(S2 if suffix else S1, "x"))
            if suffix: p += ("&" if "?" in p else "?") + suffix
            before = [counter(x) for x in (S1, S2)]
            s, b = req(ip, m, p, body)
            after = [counter(x) for x in (S1, S2)]
            if after != before: bad.append(f"{m} {p} -> {s} {b[:80]!r}")
        print(f"== {where}: {len(bad)} forwarded-HTTP of {len(cases)}"); [print("  ", x) for x in bad]
    run("client local", C, "", "n-"+C)
    run("server ?dc=dc2", S1, "dc=dc2", "n-"+S2)
    run("client ?dc=dc2", C, "dc=dc2", "n-"+S2)
finally:
    for p in procs: p.kill()
