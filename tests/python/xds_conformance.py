"""An independent ADS client (grpcio + xds-protos from PyPI) against praetor's gRPC port.

Checks the xDS protocol as Envoy speaks it and Consul serves it: delta subscribe, ACK,
NACK (never answered with the same resources), removal, reconnect with
initial_resource_versions, state-of-the-world, an unknown type URL (ignored), a missing
type URL (InvalidArgument), a resolver subset's filter over the endpoints, and tokens (a
wrong one is Unauthenticated, one without service:write PermissionDenied, a revoked one ends
its stream).

Usage: xds_conformance.py <agent ip> <http port> <grpc port> [<acl agent ip> <root token>]
Prints one line per check and 'N passed, N failed'; exits non-zero on any failure.
"""

import json
import queue
import sys
import threading
import time
import urllib.request

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"

# How long a response may take to arrive, and how long silence must last to count as none.
RESPONSE_TIMEOUT_S = 15
SILENCE_S = 1.5


def http(ip, port, method, path, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{ip}:{port}{path}", data=data, method=method)
    if token:
        req.add_header("X-Consul-Token", token)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


class Stream:
    """One ADS stream: requests go in through a queue, responses come out through one."""

    def __init__(self, target, delta=True, token="", node_id="web-sidecar-proxy"):
        self.node = base_pb2.Node(id=node_id, cluster="web")
        self.requests = queue.Queue()
        self.responses = queue.Queue()
        self.channel = grpc.insecure_channel(target)
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        method = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        self.call = method(iter(self.requests.get, None), metadata=[("x-consul-token", token)])
        self.error = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for response in self.call:
                self.responses.put(response)
        except grpc.RpcError as e:
            self.error = e
            self.responses.put(e)

    def send(self, **fields):
        cls = discovery_pb2.DeltaDiscoveryRequest
        if "resource_names" in fields or "version_info" in fields:
            cls = discovery_pb2.DiscoveryRequest
        self.requests.put(cls(node=self.node, **fields))

    def next(self, timeout=RESPONSE_TIMEOUT_S):
        item = self.responses.get(timeout=timeout)
        if isinstance(item, grpc.RpcError):
            raise item
        return item

    def silent(self, seconds=SILENCE_S):
        try:
            item = self.responses.get(timeout=seconds)
        except queue.Empty:
            return True
        if isinstance(item, grpc.RpcError):
            raise item
        raise AssertionError(f"expected silence, got {item.type_url} nonce {item.nonce}")

    def close(self):
        self.requests.put(None)
        self.channel.close()


def names(response):
    return sorted(r.name for r in response.resources)


def sync_delta(stream):
    """Subscribes to clusters and listeners, ACKs everything; returns the last response of
    each type."""
    seen = {}
    stream.send(type_url=CDS)
    stream.send(type_url=LDS)
    cds = stream.next()
    assert cds.type_url == CDS, cds.type_url
    seen[CDS] = cds
    eds_names = [n for n in names(cds) if n != "local_app"]
    # As Envoy does: the new clusters' endpoints are asked for before the clusters are ACKed.
    stream.send(type_url=EDS, resource_names_subscribe=eds_names)
    stream.send(type_url=CDS, response_nonce=cds.nonce)
    eds = stream.next()
    assert eds.type_url == EDS, eds.type_url
    seen[EDS] = eds
    stream.send(type_url=EDS, response_nonce=eds.nonce)
    lds = stream.next()
    assert lds.type_url == LDS, lds.type_url
    seen[LDS] = lds
    stream.send(type_url=LDS, response_nonce=lds.nonce)
    return seen


def main():
    ip, http_port, grpc_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    target = f"{ip}:{grpc_port}"
    results = []

    def check(name, fn):
        try:
            fn()
            results.append(True)
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 - every failure is reported by name
            results.append(False)
            print(f"FAIL {name}: {type(e).__name__}: {e}")

    def register_web(upstreams):
        http(ip, http_port, "PUT", "/v1/agent/service/register", {
            "Name": "web", "Port": 8080,
            "Connect": {"SidecarService": {"Port": 21555, "Proxy": {"Upstreams": upstreams}}},
        })

    register_web([{"DestinationName": "db", "LocalBindPort": 19191},
                  {"DestinationName": "cache", "LocalBindPort": 19192}])
    td = json.loads(http(ip, http_port, "GET", "/v1/connect/ca/roots"))["TrustDomain"]
    state = {}

    def subscribe_and_ack():
        s = Stream(target)
        seen = sync_delta(s)
        cds = seen[CDS]
        assert names(cds) == sorted([f"cache.default.dc1.internal.{td}",
                                     f"db.default.dc1.internal.{td}", "local_app"]), names(cds)
        for r in cds.resources:
            assert len(r.version) == 64 and int(r.version, 16) >= 0, r.version
            assert r.resource.type_url == CDS
        assert names(seen[LDS]) == sorted(["cache:127.0.0.1:19192", "db:127.0.0.1:19191",
                                           "public_listener:0.0.0.0:21555"]), names(seen[LDS])
        assert len({cds.nonce, seen[EDS].nonce, seen[LDS].nonce}) == 3, "nonces are unique"
        # Everything ACKed: nothing more to say.
        assert s.silent()
        state["stream"] = s
        state["versions"] = {t: {r.name: r.version for r in seen[t].resources} for t in seen}

    def nack_is_not_answered_with_the_same_resources():
        s = state["stream"]
        # A change the server must push: drop the cache upstream.
        register_web([{"DestinationName": "db", "LocalBindPort": 19191}])
        lds = s.next()
        assert lds.type_url == LDS, lds.type_url
        assert "cache:127.0.0.1:19192" in lds.removed_resources, lds
        err = status_pb2.Status(code=3, message="conformance suite rejects this")
        s.send(type_url=LDS, response_nonce=lds.nonce, error_detail=err)
        # The NACK is logged, never answered by the same update again.
        assert s.silent(2.5)
        state["nacked"] = lds.nonce

    def removal_reaches_clusters_after_listeners():
        # Reconnect, then remove an upstream: listeners first, then clusters.
        s = Stream(target)
        sync_delta(s)
        register_web([])
        lds = s.next()
        assert lds.type_url == LDS and "db:127.0.0.1:19191" in lds.removed_resources, lds
        s.send(type_url=LDS, response_nonce=lds.nonce)
        cds = s.next()
        assert cds.type_url == CDS, cds.type_url
        assert f"db.default.dc1.internal.{td}" in cds.removed_resources, cds
        s.send(type_url=CDS, response_nonce=cds.nonce)
        s.close()
        register_web([{"DestinationName": "db", "LocalBindPort": 19191},
                      {"DestinationName": "cache", "LocalBindPort": 19192}])

    def reconnect_with_initial_versions():
        first = Stream(target)
        seen = sync_delta(first)
        versions = {r.name: r.version for r in seen[CDS].resources}
        first.close()
        s = Stream(target)
        s.send(type_url=CDS, initial_resource_versions=versions)
        cds = s.next()
        assert cds.type_url == CDS
        assert len(cds.resources) == 0, f"resent {names(cds)} that the client had"
        s.send(type_url=CDS, response_nonce=cds.nonce)
        # A stale version is resent, an unknown one removed.
        stale = dict(versions)
        stale["local_app"] = "0" * 64
        stale["gone"] = "1" * 64
        s.close()
        s = Stream(target)
        s.send(type_url=CDS, initial_resource_versions=stale)
        cds = s.next()
        assert names(cds) == ["local_app"], names(cds)
        s.send(type_url=CDS, response_nonce=cds.nonce)
        removal = s.next()
        assert list(removal.removed_resources) == ["gone"], removal
        s.close()

    def unknown_type_url_is_ignored():
        s = Stream(target)
        s.send(type_url="type.googleapis.com/envoy.unknown.v3.Thing")
        assert s.silent()
        # The stream still serves the types it knows.
        s.send(type_url=CDS)
        assert s.next().type_url == CDS
        s.close()

    def missing_type_url_is_invalid_argument():
        s = Stream(target)
        s.send(type_url="")
        try:
            s.next()
            raise AssertionError("no error")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert "type URL is required for ADS" in e.details(), e.details()

    def state_of_the_world():
        s = Stream(target, delta=False)
        s.send(type_url=CDS, resource_names=[])
        cds = s.next()
        assert cds.type_url == CDS and cds.version_info and cds.nonce
        assert len(cds.resources) == 3, len(cds.resources)
        s.send(type_url=CDS, version_info=cds.version_info, response_nonce=cds.nonce)
        assert s.silent()
        s.send(type_url=EDS, resource_names=[f"db.default.dc1.internal.{td}"])
        eds = s.next()
        assert eds.type_url == EDS and len(eds.resources) == 1
        s.close()

    def subset_filter_selects_endpoints():
        for version, port, proxy_port in (("v1", 9601, 21601), ("v2", 9602, 21602)):
            http(ip, http_port, "PUT", "/v1/agent/service/register", {
                "ID": f"shard-{version}", "Name": "shard", "Port": port, "Meta": {"version": version},
                "Connect": {"SidecarService": {"Port": proxy_port}},
            })
        http(ip, http_port, "PUT", "/v1/config", {
            "Kind": "service-resolver", "Name": "shard", "DefaultSubset": "v2",
            "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"},
                        "v2": {"Filter": "Service.Meta.version == v2"}},
        })
        http(ip, http_port, "PUT", "/v1/agent/service/register", {
            "Name": "api", "Port": 8081,
            "Connect": {"SidecarService": {"Port": 21603, "Proxy": {
                "Upstreams": [{"DestinationName": "shard", "LocalBindPort": 19193}]}}},
        })
        s = Stream(target, node_id="api-sidecar-proxy")
        seen = sync_delta(s)
        cluster = f"v2.shard.default.dc1.internal.{td}"
        assert names(seen[CDS]) == sorted([cluster, "local_app"]), names(seen[CDS])
        assert names(seen[EDS]) == [cluster], names(seen[EDS])
        assignment = endpoint_pb2.ClusterLoadAssignment()
        seen[EDS].resources[0].resource.Unpack(assignment)
        ports = [e.endpoint.address.socket_address.port_value
                 for locality in assignment.endpoints for e in locality.lb_endpoints]
        assert ports == [21602], ports
        s.close()

    check("delta: subscribe, ACK, content-hash versions, unique nonces", subscribe_and_ack)
    check("delta: a NACK is never answered with the same resources", nack_is_not_answered_with_the_same_resources)
    check("delta: removals, listeners before clusters", removal_reaches_clusters_after_listeners)
    check("delta: reconnect with initial_resource_versions", reconnect_with_initial_versions)
    check("delta: an unknown type URL is ignored", unknown_type_url_is_ignored)
    check("delta: a missing type URL is InvalidArgument", missing_type_url_is_invalid_argument)
    check("state of the world: subscribe, ACK, named resources", state_of_the_world)
    check("endpoints: a resolver subset's Filter selects the instances", subset_filter_selects_endpoints)
    if "stream" in state:
        state["stream"].close()

    if len(sys.argv) > 5:
        acl_ip, root = sys.argv[4], sys.argv[5]
        acl_target = f"{acl_ip}:{grpc_port}"

        def acl_tokens():
            http(acl_ip, http_port, "PUT", "/v1/agent/service/register", {
                "Name": "web", "Port": 8080,
                "Connect": {"SidecarService": {"Port": 21555}},
            }, token=root)
            # A token that may only read.
            policy = json.loads(http(acl_ip, http_port, "PUT", "/v1/acl/policy", {
                "Name": "read-web", "Rules": 'service "web" { policy = "read" }',
            }, token=root))
            reader = json.loads(http(acl_ip, http_port, "PUT", "/v1/acl/token", {
                "Policies": [{"ID": policy["ID"]}],
            }, token=root))
            for token, code, text in [
                ("not-a-token", grpc.StatusCode.UNAUTHENTICATED, "ACL not found"),
                (reader["SecretID"], grpc.StatusCode.PERMISSION_DENIED, "lacks permission 'service:write'"),
            ]:
                s = Stream(acl_target, token=token)
                s.send(type_url=CDS)
                try:
                    got = s.next()
                    raise AssertionError(f"token {token!r} got {got.type_url}")
                except grpc.RpcError as e:
                    assert e.code() == code, (token, e.code(), e.details())
                    assert text in e.details(), e.details()
            s = Stream(acl_target, token=root)
            s.send(type_url=CDS)
            assert s.next().type_url == CDS
            s.close()

        def revoked_token_ends_the_stream():
            policy = json.loads(http(acl_ip, http_port, "PUT", "/v1/acl/policy", {
                "Name": "write-web", "Rules": 'service "web" { policy = "write" }',
            }, token=root))
            writer = json.loads(http(acl_ip, http_port, "PUT", "/v1/acl/token", {
                "Policies": [{"ID": policy["ID"]}],
            }, token=root))
            s = Stream(acl_target, token=writer["SecretID"])
            s.send(type_url=CDS)
            cds = s.next()
            assert cds.type_url == CDS
            s.send(type_url=CDS, response_nonce=cds.nonce)
            http(acl_ip, http_port, "DELETE", f"/v1/acl/token/{writer['AccessorID']}", token=root)
            deadline = time.monotonic() + 5
            while True:
                try:
                    s.next(timeout=max(0.1, deadline - time.monotonic()))
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.UNAUTHENTICATED, (e.code(), e.details())
                    return
                except queue.Empty:
                    raise AssertionError("the stream outlived its token by 5 s")
                assert time.monotonic() < deadline, "the stream outlived its token by 5 s"

        check("tokens: a wrong one is Unauthenticated, one without service:write PermissionDenied", acl_tokens)
        check("tokens: a revoked token ends its stream at once", revoked_token_ends_the_stream)

    failed = results.count(False)
    print(f"{results.count(True)} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
