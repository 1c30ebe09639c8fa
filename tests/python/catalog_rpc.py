#!/usr/bin/env python3
"""Consul's Catalog.NodeServiceList, Catalog.GatewayServices, Health.ServiceNodes (with
Connect and a Source), FederationState.Get and Coordinate.ListDatacenters on a server's RPC
port (byte 0), written from Consul's agent/structs/structs.go, config_entry_gateways.go and
federation_state.go with no praetor code, using consul_rpc.py's codec.

Usage:
  catalog_rpc.py <ip>     register a node with a service, a proxy and an ingress gateway
                          (whose ingress-gateway entry linking web is already written),
                          then read them back in Consul's shapes

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import sys

from consul_rpc import check, plain_codec


def main():
    ip = sys.argv[1]
    sock, codec = plain_codec(ip)

    # A node with a service and a sidecar proxy for it.
    for service in (
        {"ID": "web-1", "Service": "web", "Port": 80, "Tags": ["x"]},
        {"ID": "web-proxy", "Service": "web-proxy", "Port": 21000, "Kind": "connect-proxy",
         "Proxy": {"DestinationServiceName": "web"}},
        {"ID": "gw", "Service": "gw", "Port": 8080, "Kind": "ingress-gateway"},
    ):
        answer = codec.ok("Catalog.Register", {
            "Datacenter": "dc1", "Node": "rpc-node", "Address": "10.9.0.1", "Service": service})
        check(answer == {}, f"Catalog.Register answered {answer!r}")

    # IndexedNodeServiceList: NodeServices is a NodeServiceList {Node, Services: [...]}.
    listed = codec.ok("Catalog.NodeServiceList", {"Datacenter": "dc1", "Node": "rpc-node"})
    check(listed["Index"] > 0 and listed["KnownLeader"] is True, f"QueryMeta {listed!r}")
    node_services = listed["NodeServices"]
    check(node_services["Node"]["Node"] == "rpc-node", f"node {node_services!r}")
    check(node_services["Node"]["Address"] == "10.9.0.1", f"node {node_services!r}")
    ids = sorted(s["ID"] for s in node_services["Services"])
    check(ids == ["gw", "web-1", "web-proxy"], f"services {ids!r}")
    # An unknown node: the struct is there, its Node nil.
    missing = codec.ok("Catalog.NodeServiceList", {"Node": "nobody"})
    check(missing["NodeServices"]["Node"] is None, f"unknown node {missing!r}")
    check(not missing["NodeServices"]["Services"], f"unknown node {missing!r}")

    # The ingress gateway's entry (written over HTTP before this script ran) links web:
    # GatewayServices answers the row.
    rows = codec.ok("Catalog.GatewayServices", {"ServiceName": "gw"})
    check(isinstance(rows["Services"], list), f"IndexedGatewayServices {rows!r}")
    (row,) = rows["Services"]
    check(row["Gateway"]["Name"] == "gw" and row["Service"]["Name"] == "web", f"{row!r}")
    check(row["GatewayKind"] == "ingress-gateway" and row["Port"] == 8080, f"{row!r}")
    check(row["CreateIndex"] > 0 and row["ModifyIndex"] >= row["CreateIndex"], f"{row!r}")
    # A gateway that links nothing: nil.
    none = codec.ok("Catalog.GatewayServices", {"ServiceName": "no-such-gateway"})
    check(none["Services"] is None, f"an unknown gateway's rows {none!r}")

    # Health.ServiceNodes with Connect: the proxy fronting web, with a Source (a node of
    # this datacenter, nearest first; an unknown one leaves the order alone).
    connect = codec.ok("Health.ServiceNodes", {
        "ServiceName": "web", "Connect": True,
        "Source": {"Datacenter": "dc1", "Node": "rpc-node"}})
    (proxy,) = connect["Nodes"]
    check(proxy["Service"]["ID"] == "web-proxy", f"connect {proxy!r}")
    # Catalog.ServiceNodes with ServiceTags and TagFilter.
    tagged = codec.ok("Catalog.ServiceNodes", {
        "ServiceName": "web", "ServiceTags": ["x"], "TagFilter": True})
    check([n["ServiceID"] for n in tagged["ServiceNodes"]] == ["web-1"], f"tagged {tagged!r}")
    untagged = codec.ok("Catalog.ServiceNodes", {
        "ServiceName": "web", "ServiceTags": ["nope"], "TagFilter": True})
    check(untagged["ServiceNodes"] is None, f"tag nope {untagged!r}")

    # FederationStateResponse: an unknown datacenter's State is nil.
    state = codec.ok("FederationState.Get", {"TargetDatacenter": "dc9"})
    check(state["State"] is None and state["Index"] > 0, f"FederationStateResponse {state!r}")

    # []DatacenterMap: this datacenter, in the WAN area.
    maps = codec.ok("Coordinate.ListDatacenters", {})
    check(isinstance(maps, list) and maps, f"ListDatacenters {maps!r}")
    check(any(m["Datacenter"] == "dc1" and m["AreaID"] == "wan" for m in maps), f"{maps!r}")
    sock.close()
    print("ok")


if __name__ == "__main__":
    main()
