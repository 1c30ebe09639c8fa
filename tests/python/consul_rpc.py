#!/usr/bin/env python3
"""An independent client of Consul's server RPC (port 8300), written from Consul's
documented wire and structs, with no praetor code: Go's net/rpc with msgpack
(hashicorp/net-rpc-msgpackrpc: a header map {ServiceMethod, Seq}, then the body; answers
{ServiceMethod, Seq, Error}, then the body), on byte 0 (one codec on the connection) and on
byte 4 (yamux, hashicorp/yamux spec.md: 12-byte big-endian headers, one codec per stream),
and over TLS (byte 3, then the inner byte); auto-encrypt's certificate request on byte 7
(TLS without a client certificate, then the codec at once, as Consul's agent dials it).

Usage:
  consul_rpc.py plain <ip>                  calls over byte 0 and yamux, bad input
  consul_rpc.py tls <ip> <ca> <cert> <key>  calls over TLS with a client certificate
  consul_rpc.py follower <follower> <leader>  calls to a follower, served by the leader
  consul_rpc.py acl <ip> <management token>   calls checked against tokens

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import select
import socket
import ssl
import struct
import sys
import threading
import time

import msgpack

RPC_CONSUL = 0
RPC_TLS = 3
RPC_MULTIPLEX_V2 = 4
RPC_TLS_INSECURE = 7
PORT = 8300
SECOND = 1_000_000_000  # a Go time.Duration is nanoseconds


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def unpacker():
    # Go's go-msgpack writes strings and []byte alike as raw strings.
    return msgpack.Unpacker(raw=False, unicode_errors="surrogateescape", strict_map_key=False)


def text(value):
    """A []byte the server sent, whichever msgpack family it used."""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


class Codec:
    """One msgpack net/rpc client codec over a stream: calls one at a time, in order."""

    def __init__(self, send, receive):
        self.send = send
        self.receive = receive
        self.values = unpacker()
        self.seq = 0

    def next_value(self):
        while True:
            for value in self.values:
                return value
            chunk = self.receive()
            if not chunk:
                raise ConnectionError("closed by the server")
            self.values.feed(chunk)

    def call(self, method, body):
        self.seq += 1
        self.send(pack({"ServiceMethod": method, "Seq": self.seq}) + pack(body))
        header = self.next_value()
        reply = self.next_value()
        check(isinstance(header, dict), f"{method}: answer header {header!r} is not a map")
        check(header.get("Seq") == self.seq, f"{method}: answer for seq {header.get('Seq')}")
        check(header.get("ServiceMethod") == method, f"{method}: answer names {header!r}")
        return header.get("Error", ""), reply

    def ok(self, method, body):
        error, reply = self.call(method, body)
        check(error == "", f"{method}: unexpected error {error!r}")
        return reply


def dial(ip, first_byte):
    sock = socket.create_connection((ip, PORT), timeout=30)
    sock.sendall(bytes([first_byte]))
    return sock


def plain_codec(ip):
    sock = dial(ip, RPC_CONSUL)
    return sock, Codec(sock.sendall, lambda: sock.recv(65536))


# ---- yamux, from its spec ----

YAMUX_DATA, YAMUX_WINDOW_UPDATE, YAMUX_PING, YAMUX_GO_AWAY = 0, 1, 2, 3
SYN, ACK, FIN, RST = 1, 2, 4, 8
INITIAL_WINDOW = 256 * 1024


def yamux_header(kind, flags, stream_id, length):
    return struct.pack(">BBHII", 0, kind, flags, stream_id, length)


class Yamux:
    """A small yamux client session: a reader thread demultiplexes frames into streams,
    answers pings and tops up receive windows."""

    def __init__(self, sock):
        self.sock = sock
        self.lock = threading.Lock()
        self.next_id = 1
        self.streams = {}
        self.go_away = None
        threading.Thread(target=self.read_loop, daemon=True).start()

    def write(self, data):
        with self.lock:
            self.sock.sendall(data)

    def open(self):
        stream = YamuxStream(self, self.next_id)
        self.streams[stream.id] = stream
        self.next_id += 2
        self.write(yamux_header(YAMUX_WINDOW_UPDATE, SYN, stream.id, 0))
        return stream

    def receive_some(self, n):
        """Up to n bytes. OpenSSL forbids reading and writing one TLS connection from two
        threads at once (a TLS 1.3 session ticket read here while a call is written there
        corrupts the connection), so every read takes the write lock, without blocking:
        the bytes a reader would wait for may only come after the next call is written."""
        while True:
            select.select([self.sock], [], [], 0.05)
            with self.lock:
                self.sock.setblocking(False)
                try:
                    return self.sock.recv(n)
                except (ssl.SSLWantReadError, BlockingIOError):
                    pass
                finally:
                    self.sock.setblocking(True)

    def read_exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.receive_some(n - len(data))
            if not chunk:
                raise ConnectionError("session closed")
            data += chunk
        return data

    def read_loop(self):
        try:
            while True:
                version, kind, flags, stream_id, length = struct.unpack(
                    ">BBHII", self.read_exactly(12)
                )
                if version != 0:
                    raise ValueError(f"yamux version {version}")
                if kind == YAMUX_PING:
                    if flags & SYN:
                        self.write(yamux_header(YAMUX_PING, ACK, 0, length))
                    continue
                if kind == YAMUX_GO_AWAY:
                    self.go_away = length
                    continue
                stream = self.streams.get(stream_id)
                payload = self.read_exactly(length) if kind == YAMUX_DATA else b""
                if stream is None:
                    continue
                if flags & ACK:
                    stream.acknowledged = True
                if kind == YAMUX_WINDOW_UPDATE:
                    stream.send_window += length
                if payload:
                    stream.deliver(payload)
                if flags & (FIN | RST):
                    stream.deliver(b"")
        except (ConnectionError, OSError, ValueError):
            for stream in self.streams.values():
                stream.deliver(b"")


class YamuxStream:
    def __init__(self, session, stream_id):
        self.session = session
        self.id = stream_id
        self.acknowledged = False
        self.send_window = INITIAL_WINDOW
        self.consumed = 0
        self.arrived = []
        self.ready = threading.Condition()

    def deliver(self, payload):
        with self.ready:
            self.arrived.append(payload)
            self.ready.notify()

    def send(self, data):
        check(len(data) <= self.send_window, "a call larger than the stream's window")
        self.send_window -= len(data)
        self.session.write(yamux_header(YAMUX_DATA, 0, self.id, len(data)) + data)

    def receive(self):
        with self.ready:
            while not self.arrived:
                if not self.ready.wait(timeout=60):
                    fail(f"stream {self.id}: nothing arrived in 60 s")
            payload = self.arrived.pop(0)
        self.consumed += len(payload)
        if self.consumed >= INITIAL_WINDOW // 2:
            self.session.write(yamux_header(YAMUX_WINDOW_UPDATE, 0, self.id, self.consumed))
            self.consumed = 0
        return payload

    def codec(self):
        return Codec(self.send, self.receive)

    def close(self):
        self.session.write(yamux_header(YAMUX_WINDOW_UPDATE, FIN, self.id, 0))


# ---- the calls ----


def kv_set(codec, key, value):
    reply = codec.ok(
        "KVS.Apply",
        {"Datacenter": "dc1", "Op": "set", "DirEnt": {"Key": key, "Value": value, "Flags": 7}},
    )
    # Consul's state store reports nothing for a plain set, which KVS.Apply replies false.
    check(reply is False, f"KVS.Apply set replied {reply!r}")


def kv_get(codec, key, min_index=0, wait_s=0):
    body = {"Datacenter": "dc1", "Key": key}
    if min_index:
        body["MinQueryIndex"] = min_index
        body["MaxQueryTime"] = wait_s * SECOND
    reply = codec.ok("KVS.Get", body)
    check(isinstance(reply, dict), f"KVS.Get replied {reply!r}")
    for field in ("Index", "KnownLeader", "LastContact", "ConsistencyLevel"):
        check(field in reply, f"KVS.Get reply lacks QueryMeta's {field}: {reply!r}")
    return reply


def entry_value(reply):
    entries = reply.get("Entries") or []
    check(len(entries) == 1, f"expected one entry: {reply!r}")
    return text(entries[0]["Value"])


def status_and_kv(codec, prefix):
    check(codec.ok("Status.Ping", {}) == {}, "Status.Ping replied something")
    leader = codec.ok("Status.Leader", {})
    check(isinstance(leader, str) and leader.endswith(":8300"), f"Status.Leader: {leader!r}")
    peers = codec.ok("Status.Peers", {})
    check(peers == [leader], f"Status.Peers {peers!r} is not [{leader!r}]")
    missing = kv_get(codec, f"{prefix}/missing")
    check(missing.get("Entries") is None, f"a missing key answered {missing!r}")
    check(missing["Index"] >= 1, "index 0 answered")
    kv_set(codec, f"{prefix}/a", b"hello")
    got = kv_get(codec, f"{prefix}/a")
    check(entry_value(got) == b"hello", f"KVS.Get answered {got!r}")
    entry = got["Entries"][0]
    check(entry["Key"] == f"{prefix}/a" and entry["Flags"] == 7, f"entry {entry!r}")
    check(got["Index"] == entry["ModifyIndex"], "a key's index is its ModifyIndex")
    check(got["ConsistencyLevel"] == "leader" and got["KnownLeader"] is True, f"meta {got!r}")


def woken_by(reader, key, index, write, what):
    """Starts a blocking KVS.Get of `key` past `index` on `reader`, checks that it still
    waits a second later, runs `write`, and returns the reply the write woke it with and how
    long it blocked."""
    result = {}

    def wait():
        started = time.monotonic()
        result["reply"] = kv_get(reader, key, min_index=index, wait_s=30)
        result["elapsed"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.0)
    check(waiter.is_alive(), f"{what}: the blocking KVS.Get answered before the write")
    write()
    waiter.join(timeout=20)
    check(not waiter.is_alive(), f"{what}: the blocking KVS.Get was not woken by the write")
    reply = result["reply"]
    check(reply["Index"] > index, f"{what}: woken with index {reply['Index']} <= {index}")
    return reply, result["elapsed"]


def blocking_get_is_woken_by_a_write(ip):
    """A KVS.Get with MinQueryIndex parks until a write on another connection moves it."""
    sock_a, reader = plain_codec(ip)
    sock_b, writer = plain_codec(ip)
    kv_set(writer, "rpc/block", b"before")
    index = kv_get(reader, "rpc/block")["Index"]
    reply, elapsed = woken_by(
        reader, "rpc/block", index, lambda: kv_set(writer, "rpc/block", b"after"), "byte 0"
    )
    check(entry_value(reply) == b"after", f"woken with {reply!r}")
    check(1.0 <= elapsed < 15, f"blocked {elapsed:.1f} s")
    # A blocking query nothing moves answers when its wait runs out, at the same index.
    started = time.monotonic()
    reply = kv_get(reader, "rpc/block", min_index=reply["Index"], wait_s=1)
    elapsed = time.monotonic() - started
    check(1.0 <= elapsed < 5, f"a 1 s wait took {elapsed:.1f} s")
    check(entry_value(reply) == b"after", "the timed-out answer changed")
    sock_a.close()
    sock_b.close()


def catalog_health_session(codec):
    reply = codec.ok(
        "Catalog.Register",
        {
            "Datacenter": "dc1",
            "Node": "rpc-node",
            "Address": "10.1.2.3",
            "NodeMeta": {"rack": "r1"},
            "Service": {"ID": "web1", "Service": "web", "Port": 8080, "Tags": ["v1"]},
            "Check": {
                "CheckID": "web-alive",
                "Name": "web alive",
                "Status": "passing",
                "ServiceID": "web1",
            },
        },
    )
    check(reply == {}, f"Catalog.Register replied {reply!r}")
    health = codec.ok("Health.ServiceNodes", {"Datacenter": "dc1", "ServiceName": "web"})
    nodes = health.get("Nodes") or []
    check(len(nodes) == 1, f"Health.ServiceNodes answered {health!r}")
    row = nodes[0]
    check(row["Node"]["Node"] == "rpc-node", f"node {row['Node']!r}")
    check(row["Node"]["Address"] == "10.1.2.3", f"address {row['Node']!r}")
    check(row["Node"]["Meta"] == {"rack": "r1"}, f"meta {row['Node']!r}")
    service = row["Service"]
    check(
        (service["ID"], service["Service"], service["Port"], service["Tags"])
        == ("web1", "web", 8080, ["v1"]),
        f"service {service!r}",
    )
    check(service["Weights"] == {"Passing": 1, "Warning": 1}, f"weights {service!r}")
    checks = {c["CheckID"]: c for c in row["Checks"]}
    check("web-alive" in checks, f"checks {row['Checks']!r}")
    check(checks["web-alive"]["Status"] == "passing", f"check {checks['web-alive']!r}")
    check(checks["web-alive"]["ServiceName"] == "web", "the check names its service")
    # Tag filtering, as the agent asks for it.
    none = codec.ok(
        "Health.ServiceNodes",
        {"ServiceName": "web", "ServiceTags": ["v2"], "TagFilter": True},
    )
    check(none.get("Nodes") is None, f"a tag no instance has answered {none!r}")
    listed = codec.ok("Catalog.ListServices", {})
    check(listed["Services"].get("web") == ["v1"], f"Catalog.ListServices {listed!r}")
    # A register without an address, as Consul refuses it.
    error, _ = codec.call("Catalog.Register", {"Node": "n2"})
    check(
        error == "Must provide address if SkipNodeUpdate is not set",
        f"an address-less registration answered {error!r}",
    )
    # Sessions.
    session_id = codec.ok(
        "Session.Apply",
        {
            "Datacenter": "dc1",
            "Op": "create",
            "Session": {
                "Node": "rpc-node",
                "Name": "rpc-session",
                "Behavior": "release",
                "NodeChecks": [],
                "LockDelay": 0,
            },
        },
    )
    check(isinstance(session_id, str) and len(session_id) == 36, f"Session.Apply {session_id!r}")
    got = codec.ok("Session.Get", {"SessionID": session_id})
    sessions = got.get("Sessions") or []
    check(len(sessions) == 1, f"Session.Get {got!r}")
    check(sessions[0]["ID"] == session_id and sessions[0]["Node"] == "rpc-node", f"{sessions!r}")
    check(sessions[0]["Name"] == "rpc-session", f"{sessions!r}")
    # The session locks a key through KVS.Apply.
    locked = codec.ok(
        "KVS.Apply",
        {"Op": "lock", "DirEnt": {"Key": "rpc/lock", "Value": b"me", "Session": session_id}},
    )
    check(locked is True, f"KVS.Apply lock replied {locked!r}")
    held = kv_get(codec, "rpc/lock")
    check(held["Entries"][0]["Session"] == session_id, f"lock holder {held!r}")
    error, _ = codec.call("Session.Apply", {"Op": "create", "Session": {"Node": "rpc-node", "Behavior": "bogus"}})
    check(error == "Invalid Behavior setting 'bogus'", f"a bad behavior answered {error!r}")
    destroyed = codec.ok("Session.Apply", {"Op": "destroy", "Session": {"ID": session_id}})
    check(destroyed == "", f"Session.Apply destroy replied {destroyed!r}")
    released = kv_get(codec, "rpc/lock")
    check(not released["Entries"][0].get("Session"), f"the lock outlived its session {released!r}")


def every_other_method(codec):
    """The rest of what a server serves, each checked for its shape and a value or two."""
    kv_set(codec, "rpc/list/a", b"1")
    kv_set(codec, "rpc/list/b/c", b"2")
    listed = codec.ok("KVS.List", {"Key": "rpc/list/"})
    check([e["Key"] for e in listed["Entries"]] == ["rpc/list/a", "rpc/list/b/c"], f"{listed!r}")
    keys = codec.ok("KVS.ListKeys", {"Prefix": "rpc/list/", "Seperator": "/"})
    check(keys["Keys"] == ["rpc/list/a", "rpc/list/b/"], f"KVS.ListKeys {keys!r}")
    txn = codec.ok(
        "Txn.Apply",
        {
            "Ops": [
                {"KV": {"Verb": "set", "DirEnt": {"Key": "rpc/txn", "Value": b"t"}}},
                {"KV": {"Verb": "get", "DirEnt": {"Key": "rpc/txn"}}},
            ]
        },
    )
    check(txn["Errors"] is None and len(txn["Results"]) == 2, f"Txn.Apply {txn!r}")
    check(text(txn["Results"][1]["KV"]["Value"]) == b"t", f"Txn.Apply get {txn!r}")
    failed = codec.ok("Txn.Apply", {"Ops": [{"KV": {"Verb": "frob", "DirEnt": {"Key": "x"}}}]})
    check(failed["Errors"][0]["What"] == 'unknown KV verb "frob"', f"a bad verb {failed!r}")
    read = codec.ok("Txn.Read", {"Ops": [{"KV": {"Verb": "get", "DirEnt": {"Key": "rpc/txn"}}}]})
    check(text(read["Results"][0]["KV"]["Value"]) == b"t", f"Txn.Read {read!r}")
    check("Index" in read and "KnownLeader" in read, f"Txn.Read meta {read!r}")
    nodes = codec.ok("Catalog.ListNodes", {})
    check("rpc-node" in [n["Node"] for n in nodes["Nodes"]], f"Catalog.ListNodes {nodes!r}")
    only = codec.ok("Catalog.ListNodes", {"NodeMetaFilters": {"rack": "r1"}})
    check([n["Node"] for n in only["Nodes"]] == ["rpc-node"], f"node meta filter {only!r}")
    filtered = codec.ok("Catalog.ListNodes", {"Filter": 'Node == "rpc-node"'})
    check([n["Node"] for n in filtered["Nodes"]] == ["rpc-node"], f"a filter {filtered!r}")
    error, _ = codec.call("Catalog.ListNodes", {"Filter": "Node =="})
    check(error.startswith("Failed to create boolean expression evaluator"), f"{error!r}")
    services = codec.ok("Catalog.NodeServices", {"Node": "rpc-node"})
    check(services["NodeServices"]["Node"]["Node"] == "rpc-node", f"{services!r}")
    check(services["NodeServices"]["Services"]["web1"]["Port"] == 8080, f"{services!r}")
    missing = codec.ok("Catalog.NodeServices", {"Node": "nobody"})
    check(missing["NodeServices"] is None, f"an unknown node {missing!r}")
    instances = codec.ok("Catalog.ServiceNodes", {"ServiceName": "web"})
    row = instances["ServiceNodes"][0]
    check((row["Node"], row["ServiceID"], row["ServicePort"]) == ("rpc-node", "web1", 8080), f"{row!r}")
    node_checks = codec.ok("Health.NodeChecks", {"Node": "rpc-node"})
    check([c["CheckID"] for c in node_checks["HealthChecks"]] == ["web-alive"], f"{node_checks!r}")
    service_checks = codec.ok("Health.ServiceChecks", {"ServiceName": "web"})
    check(len(service_checks["HealthChecks"]) == 1, f"Health.ServiceChecks {service_checks!r}")
    passing = codec.ok("Health.ChecksInState", {"State": "passing"})
    check("web-alive" in [c["CheckID"] for c in passing["HealthChecks"]], f"{passing!r}")
    error, _ = codec.call("Health.ChecksInState", {"State": "sunny"})
    check(error == "Invalid state 'sunny'", f"a bad state {error!r}")
    info = codec.ok("Internal.NodeInfo", {"Node": "rpc-node"})
    check(info["Dump"][0]["Services"][0]["ID"] == "web1", f"Internal.NodeInfo {info!r}")
    dump = codec.ok("Internal.NodeDump", {})
    check("rpc-node" in [n["Node"] for n in dump["Dump"]], f"Internal.NodeDump {dump!r}")
    service_dump = codec.ok("Internal.ServiceDump", {})
    check(
        "web" in [n["Service"]["Service"] for n in service_dump["Nodes"]],
        f"Internal.ServiceDump {service_dump!r}",
    )
    datacenters = codec.ok("Catalog.ListDatacenters", {})
    check(datacenters == ["dc1"], f"Catalog.ListDatacenters {datacenters!r}")
    coordinates = codec.ok("Coordinate.ListNodes", {})
    check("Coordinates" in coordinates, f"Coordinate.ListNodes {coordinates!r}")
    error, _ = codec.call("ACL.TokenRead", {"TokenID": "x"})
    check(error == "ACL support disabled", f"ACL.TokenRead without ACLs {error!r}")
    session_id = codec.ok(
        "Session.Apply",
        {"Op": "create", "Session": {"Node": "rpc-node", "NodeChecks": [], "TTL": "30s"}},
    )
    renewed = codec.ok("Session.Renew", {"SessionID": session_id})
    check(renewed["Sessions"][0]["ID"] == session_id, f"Session.Renew {renewed!r}")
    check(renewed["Sessions"][0]["TTL"] == "30s", f"Session.Renew {renewed!r}")
    of_node = codec.ok("Session.NodeSessions", {"Node": "rpc-node"})
    check(session_id in [x["ID"] for x in of_node["Sessions"]], f"{of_node!r}")
    every = codec.ok("Session.List", {})
    check(session_id in [x["ID"] for x in every["Sessions"]], f"Session.List {every!r}")
    error, _ = codec.call("Session.Apply", {"Op": "create", "Session": {"Node": "rpc-node", "TTL": "1s"}})
    check(error.startswith("Invalid Session TTL '1000000000'"), f"a short TTL {error!r}")
    gone = codec.ok("Catalog.Deregister", {"Node": "rpc-node", "ServiceID": "web1"})
    check(gone == {}, f"Catalog.Deregister {gone!r}")
    after = codec.ok("Catalog.ServiceNodes", {"ServiceName": "web"})
    check(after["ServiceNodes"] is None, f"web after its deregistration {after!r}")
    # Operator.Usage: structs.Usage, the catalog's counts keyed by the server's datacenter,
    # with the read's QueryMeta; Status.Leader naming a datacenter nobody knows is refused.
    usage = codec.ok("Operator.Usage", {"Datacenter": "dc1"})
    check(list(usage["Usage"]) == ["dc1"], f"Operator.Usage {usage!r}")
    check(usage["Usage"]["dc1"]["Nodes"] >= 2, f"Operator.Usage nodes {usage!r}")
    check("connect-proxy" in usage["Usage"]["dc1"]["ConnectServiceInstances"], f"{usage!r}")
    check(usage["Index"] > 0 and usage["KnownLeader"], f"Operator.Usage meta {usage!r}")
    error, _ = codec.call("Status.Leader", {"Datacenter": "dc9"})
    check(error == "No path to datacenter", f"Status.Leader naming dc9 {error!r}")


def prepared_queries(codec):
    """PreparedQuery.* as Consul's agent calls them: write, read, explain, execute here and
    as another datacenter would (ExecuteRemote, the whole query in the request)."""
    codec.ok(
        "Catalog.Register",
        {"Node": "pq-node", "Address": "10.9.0.1",
         "Service": {"Service": "pq-web", "ID": "pq-web1", "Port": 80}},
    )
    query_id = codec.ok(
        "PreparedQuery.Apply",
        {"Op": "create", "Query": {"Name": "pq", "Service": {"Service": "pq-web"}}},
    )
    check(isinstance(query_id, str) and len(query_id) == 36, f"a new query's ID {query_id!r}")
    got = codec.ok("PreparedQuery.Get", {"QueryID": query_id})
    stored = got["Queries"][0]
    check((stored["ID"], stored["Name"]) == (query_id, "pq"), f"PreparedQuery.Get {got!r}")
    check(stored["Service"]["Service"] == "pq-web", f"PreparedQuery.Get {got!r}")
    check(got["Index"] >= stored["ModifyIndex"] > 0, f"PreparedQuery.Get meta {got!r}")
    listed = codec.ok("PreparedQuery.List", {})
    check(query_id in [q["ID"] for q in listed["Queries"]], f"PreparedQuery.List {listed!r}")
    executed = codec.ok("PreparedQuery.Execute", {"QueryIDOrName": "pq"})
    check(
        (executed["Service"], executed["Datacenter"], executed["Failovers"]) == ("pq-web", "dc1", 0),
        f"PreparedQuery.Execute {executed!r}",
    )
    check([n["Node"]["Address"] for n in executed["Nodes"]] == ["10.9.0.1"], f"{executed!r}")
    explained = codec.ok("PreparedQuery.Explain", {"QueryIDOrName": "pq"})
    check(explained["Query"]["ID"] == query_id, f"PreparedQuery.Explain {explained!r}")
    remote = codec.ok(
        "PreparedQuery.ExecuteRemote",
        {"Query": {"Service": {"Service": "pq-web"}, "DNS": {"TTL": "7s"}}, "Limit": 1},
    )
    check(len(remote["Nodes"]) == 1 and remote["DNS"]["TTL"] == "7s", f"ExecuteRemote {remote!r}")
    error, _ = codec.call("PreparedQuery.Execute", {"QueryIDOrName": "nope"})
    check(error == "Query not found", f"an unknown query executed {error!r}")
    error, _ = codec.call("PreparedQuery.Apply", {"Op": "create", "Query": {"Name": "bad"}})
    check(
        error == "Invalid prepared query: Must provide a Service name to query",
        f"a query without a service {error!r}",
    )
    codec.ok("PreparedQuery.Apply", {"Op": "delete", "Query": {"ID": query_id}})
    error, _ = codec.call("PreparedQuery.Get", {"QueryID": query_id})
    check(error == "Query not found", f"a deleted query read {error!r}")


def unknown_methods(codec):
    error, reply = codec.call("Foo.Bar", {})
    check(error == "rpc: can't find service Foo.Bar", f"unknown service answered {error!r}")
    check(reply == {}, f"an error's body is net/rpc's empty struct, got {reply!r}")
    error, _ = codec.call("KVS.Frob", {})
    check(error == "rpc: can't find method KVS.Frob", f"unknown method answered {error!r}")
    error, _ = codec.call("NoDot", {})
    check(
        error == "rpc: service/method request ill-formed: NoDot",
        f"a method without a dot answered {error!r}",
    )
    # The codec is still in step after the errors.
    check(codec.ok("Status.Ping", {}) == {}, "Status.Ping after errors")


def yamux_two_streams(ip):
    """Two streams on one yamux session: a blocking KVS.Get on one is answered after a
    write on the other, on the same connection."""
    sock = dial(ip, RPC_MULTIPLEX_V2)
    session = Yamux(sock)
    blocked = session.open().codec()
    other = session.open().codec()
    check(other.ok("Status.Ping", {}) == {}, "Status.Ping over yamux")
    kv_set(other, "rpc/mux", b"one")
    index = kv_get(blocked, "rpc/mux")["Index"]

    def write():
        # The other stream keeps serving while the first one waits.
        for _ in range(3):
            check(other.ok("Status.Ping", {}) == {}, "a stream stalled behind a blocked one")
        kv_set(other, "rpc/mux", b"two")

    reply, _ = woken_by(blocked, "rpc/mux", index, write, "yamux")
    check(entry_value(reply) == b"two", f"woken with {reply!r}")
    # More streams, each a codec of its own, then a clean close.
    third = session.open()
    unknown_methods(third.codec())
    third.close()
    check(session.go_away is None, f"the server went away ({session.go_away})")
    sock.close()


def closed_without_answer(sock):
    sock.settimeout(10)
    try:
        data = sock.recv(65536)
    except socket.timeout:
        fail("the server kept a connection that sent garbage")
    except ConnectionResetError:
        data = b""
    sock.close()
    return data


def garbage_closes_the_connection(ip):
    for first, garbage in [
        (RPC_CONSUL, b"\xc1\xc1\xc1\xc1"),  # not msgpack at all
        (RPC_CONSUL, pack([1, 2]) + pack({})),  # a value, but no rpc.Request header
        (RPC_CONSUL, b"\xdb\xff\xff\xff\xff"),  # a 4 GiB string claimed
        (0x47, b"ET / HTTP/1.1\r\n\r\n"),  # a byte no protocol uses
    ]:
        sock = dial(ip, first)
        sock.sendall(garbage)
        data = closed_without_answer(sock)
        check(data == b"", f"byte {first} + {garbage!r} answered {data!r}")
    # yamux with a bad version: a GoAway with "protocol error", then the close.
    sock = dial(ip, RPC_MULTIPLEX_V2)
    sock.sendall(struct.pack(">BBHII", 9, 0, 0, 1, 0))
    data = closed_without_answer(sock)
    check(
        data == yamux_header(YAMUX_GO_AWAY, 0, 0, 1),
        f"a bad yamux header answered {data!r}",
    )
    # The server still serves.
    sock, codec = plain_codec(ip)
    check(codec.ok("Status.Ping", {}) == {}, "the server stopped serving after garbage")
    sock.close()


def plain(ip):
    sock, codec = plain_codec(ip)
    status_and_kv(codec, "rpc/plain")
    catalog_health_session(codec)
    every_other_method(codec)
    prepared_queries(codec)
    unknown_methods(codec)
    sock.close()
    blocking_get_is_woken_by_a_write(ip)
    yamux_two_streams(ip)
    garbage_closes_the_connection(ip)


def tls(ip, ca, cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    context.load_cert_chain(cert, key)
    # verify_incoming: plaintext is refused.
    sock = dial(ip, RPC_CONSUL)
    try:
        sock.sendall(pack({"ServiceMethod": "Status.Ping", "Seq": 1}) + pack({}))
    except OSError:
        pass  # refused before the call went out
    check(closed_without_answer(sock) == b"", "plaintext RPC passed verify_incoming")
    # TLS, then the inner byte: one codec.
    raw = dial(ip, RPC_TLS)
    sock = context.wrap_socket(raw, server_hostname="server.dc1.consul")
    sock.sendall(bytes([RPC_CONSUL]))
    codec = Codec(sock.sendall, lambda: sock.recv(65536))
    status_and_kv(codec, "rpc/tls")
    unknown_methods(codec)
    sock.close()
    # TLS, then yamux inside it.
    raw = dial(ip, RPC_TLS)
    sock = context.wrap_socket(raw, server_hostname="server.dc1.consul")
    sock.sendall(bytes([RPC_MULTIPLEX_V2]))
    session = Yamux(sock)
    first, second = session.open().codec(), session.open().codec()
    kv_set(first, "rpc/tls-mux", b"x")
    check(entry_value(kv_get(second, "rpc/tls-mux")) == b"x", "yamux inside TLS")
    sock.close()
    auto_encrypt(ip, ca)


def auto_encrypt(ip, ca):
    """`AutoEncrypt.Sign` on byte 7: the server signs a CSR naming an agent's SPIFFE ID and
    answers Consul's SignedResponse; nothing else is served on that session."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    agent_uri = "spiffe://unknown.consul/agent/client/dc/dc1/id/py-agent"
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "py-agent")]))
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(agent_uri)]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    csr_pem = csr.public_bytes(serialization.Encoding.PEM).decode()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    raw = dial(ip, RPC_TLS_INSECURE)
    sock = context.wrap_socket(raw, server_hostname="server.dc1.consul")
    codec = Codec(sock.sendall, lambda: sock.recv(65536))
    reply = codec.ok("AutoEncrypt.Sign", {"Datacenter": "dc1", "CSR": csr_pem, "Token": ""})
    issued = reply["IssuedCert"]
    check(issued["Agent"] == "py-agent", f"IssuedCert.Agent {issued['Agent']!r}")
    cert = x509.load_pem_x509_certificate(text(issued["CertPEM"]))
    uris = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    uris = uris.get_values_for_type(x509.UniformResourceIdentifier)
    check(len(uris) == 1 and uris[0].endswith("/agent/client/dc/dc1/id/py-agent"), f"URIs {uris}")
    check(issued["AgentURI"] == uris[0], f"AgentURI {issued['AgentURI']!r} vs {uris}")
    check(cert.public_key().public_numbers() == key.public_key().public_numbers(), "signed another key")
    roots = reply["ConnectCARoots"]
    check(roots["TrustDomain"] and uris[0].startswith("spiffe://" + roots["TrustDomain"] + "/"),
          f"trust domain {roots['TrustDomain']!r} vs {uris}")
    active = [r for r in roots["Roots"] if r["Active"]]
    check(len(active) == 1 and active[0]["ID"] == roots["ActiveRootID"], f"roots {roots!r}")
    with open(ca) as f:
        check(reply["ManualCARoots"] == [f.read()], "ManualCARoots is not the servers' CA")
    check(reply["GossipKey"] == "", "a gossip key was handed out")
    check(isinstance(reply["VerifyServerHostname"], bool), "VerifyServerHostname")
    # The insecure session serves nothing else, and a CSR naming no agent is refused.
    error, _ = codec.call("Status.Ping", {})
    check(error == "rpc: can't find service Status.Ping", f"Status.Ping on byte 7: {error!r}")
    error, _ = codec.call("AutoEncrypt.Sign", {"Datacenter": "dc1", "CSR": "not a CSR", "Token": ""})
    check(error.startswith("invalid certificate request"), f"garbage CSR: {error!r}")
    sock.close()


def follower(follower_ip, leader_ip):
    """A follower hands writes and default reads to the leader; a stale read it serves
    itself, once it has caught up."""
    sock, codec = plain_codec(follower_ip)
    leader = codec.ok("Status.Leader", {})
    check(leader == f"{leader_ip}:{PORT}", f"the follower names {leader!r} as leader")
    kv_set(codec, "rpc/follower", b"via-follower")
    check(entry_value(kv_get(codec, "rpc/follower")) == b"via-follower", "a forwarded read")
    lsock, on_leader = plain_codec(leader_ip)
    check(
        entry_value(kv_get(on_leader, "rpc/follower")) == b"via-follower",
        "the leader lacks the follower's write",
    )
    deadline = time.monotonic() + 10
    while True:
        stale = codec.ok("KVS.Get", {"Key": "rpc/follower", "AllowStale": True})
        if stale.get("Entries"):
            break
        check(time.monotonic() < deadline, "the follower never caught up")
        time.sleep(0.1)
    check(stale["ConsistencyLevel"] == "stale", f"a stale read reports {stale!r}")
    check(entry_value(stale) == b"via-follower", "the stale read")
    # A blocking read on the follower, woken by a write on the leader.
    index = kv_get(codec, "rpc/follower")["Index"]
    reply, _ = woken_by(
        codec,
        "rpc/follower",
        index,
        lambda: kv_set(on_leader, "rpc/follower", b"from-leader"),
        "on a follower",
    )
    check(entry_value(reply) == b"from-leader", f"woken with {reply!r}")
    # Another datacenter this one does not know.
    error, _ = codec.call("KVS.Get", {"Datacenter": "nowhere", "Key": "x"})
    check(error == "No path to datacenter", f"an unknown datacenter answered {error!r}")
    sock.close()
    lsock.close()


ANONYMOUS_ACCESSOR = "00000000-0000-0000-0000-000000000002"


def acl(ip, management):
    """With ACLs on and a deny default, a call is as good as its Token."""
    sock, codec = plain_codec(ip)
    error, _ = codec.call("KVS.Get", {"Key": "secret/a"})
    check(
        error
        == f"Permission denied: token with AccessorID '{ANONYMOUS_ACCESSOR}' lacks permission 'key:read' on \"secret/a\"",
        f"an anonymous read answered {error!r}",
    )
    error, _ = codec.call("KVS.Get", {"Key": "secret/a", "Token": "not-a-token"})
    check(error == "ACL not found", f"an unknown token answered {error!r}")
    error, _ = codec.call(
        "KVS.Apply", {"Op": "set", "DirEnt": {"Key": "secret/a", "Value": b"x"}}
    )
    check(error.startswith("Permission denied"), f"an anonymous write answered {error!r}")
    reply = codec.ok(
        "KVS.Apply",
        {"Op": "set", "DirEnt": {"Key": "secret/a", "Value": b"x"}, "Token": management},
    )
    check(reply is False, f"a managed set replied {reply!r}")
    got = codec.ok("KVS.Get", {"Key": "secret/a", "Token": management})
    check(entry_value(got) == b"x", f"a managed read {got!r}")
    # A list the anonymous token may not read answers nothing, and says rows were hidden
    # only to a caller that named a token.
    hidden = codec.ok("KVS.List", {"Key": "secret/"})
    check(hidden["Entries"] is None, f"an anonymous list {hidden!r}")
    # An agent resolves a request's token by its secret.
    token = codec.ok(
        "ACL.TokenRead",
        {"TokenID": management, "TokenIDType": "secret", "Token": management},
    )
    check(token["Token"]["SecretID"] == management, f"ACL.TokenRead {token!r}")
    check(len(token["Token"]["AccessorID"]) == 36, f"ACL.TokenRead {token!r}")
    check(token["Token"]["Policies"][0]["Name"] == "global-management", f"{token!r}")
    check(isinstance(token["Token"]["CreateTime"], (bytes, str)), f"CreateTime {token!r}")
    error, _ = codec.call("ACL.TokenRead", {"TokenID": token["Token"]["AccessorID"]})
    check(error.startswith("Permission denied"), f"reading a token anonymously {error!r}")
    secondary_calls(codec, management)
    sock.close()


def go_time(unix_s):
    """Go's time.Time MarshalBinary of a Unix time in UTC, as go-msgpack writes it."""
    return bytes([1]) + (unix_s + 62135596800).to_bytes(8, "big") + bytes(4) + b"\xff\xff"


def secondary_calls(codec, management):
    """What a secondary datacenter's leader calls on its primary: FederationState.Apply
    and .List (operator:write and operator:read) and ConnectCA.SignIntermediate
    (operator:write)."""
    state = {
        "Datacenter": "dc9",
        "MeshGateways": [
            {
                "Node": {"Node": "gw9", "Address": "10.9.9.9"},
                "Service": {"ID": "gw", "Service": "gw", "Kind": "mesh-gateway", "Port": 8443},
                "Checks": [{"CheckID": "serfHealth", "Status": "passing"}],
            }
        ],
        "UpdatedAt": go_time(1_700_000_000),
        "PrimaryModifyIndex": 0,
    }
    for method, body in [
        ("FederationState.Apply", {"Op": "upsert", "State": state}),
        ("FederationState.List", {}),
        ("ConnectCA.SignIntermediate", {"CSR": "not a CSR"}),
    ]:
        error, _ = codec.call(method, body)
        check(error.startswith("Permission denied"), f"{method} anonymously {error!r}")
    applied = codec.ok("FederationState.Apply", {"Op": "upsert", "State": state, "Token": management})
    check(applied is True, f"FederationState.Apply {applied!r}")
    listed = codec.ok("FederationState.List", {"Token": management})
    states = {s["Datacenter"]: s for s in listed["States"]}
    check("dc9" in states, f"FederationState.List {listed!r}")
    gateway = states["dc9"]["MeshGateways"][0]
    check(gateway["Service"]["Port"] == 8443, f"the gateway read back {gateway!r}")
    check(text(states["dc9"]["UpdatedAt"]) == go_time(1_700_000_000), f"UpdatedAt {states['dc9']!r}")
    check(states["dc9"]["ModifyIndex"] > 0 and "Index" in listed, f"{listed!r}")
    error, _ = codec.call("FederationState.Apply", {"Op": "frob", "State": state, "Token": management})
    check(error == "Invalid federation state operation: frob", f"a bad operation {error!r}")
    gone = codec.ok("FederationState.Apply", {"Op": "delete", "State": state, "Token": management})
    check(gone is True, f"FederationState.Apply delete {gone!r}")
    listed = codec.ok("FederationState.List", {"Token": management})
    check("dc9" not in [s["Datacenter"] for s in listed["States"] or []], f"{listed!r}")
    error, _ = codec.call("ConnectCA.SignIntermediate", {"CSR": "not a CSR", "Token": management})
    check(error and not error.startswith("Permission denied"), f"a bad CSR {error!r}")


def main():
    mode = sys.argv[1]
    if mode == "plain":
        plain(sys.argv[2])
    elif mode == "tls":
        tls(*sys.argv[2:6])
    elif mode == "follower":
        follower(sys.argv[2], sys.argv[3])
    elif mode == "acl":
        acl(sys.argv[2], sys.argv[3])
    else:
        fail(f"unknown mode {mode}")
    print("ok")


if __name__ == "__main__":
    main()
