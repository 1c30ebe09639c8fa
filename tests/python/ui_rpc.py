#!/usr/bin/env python3
"""Consul's Internal.ServiceDump (its Gateways), Internal.GatewayServiceDump,
Internal.ServiceTopology, Catalog.ListNodes with a Source and Coordinate.Update on a
server's RPC port (byte 0), written from Consul's agent/structs/structs.go and
internal_endpoint.go with no praetor code, using consul_rpc.py's codec.

Usage:
  ui_rpc.py <ip>     register a service with a sidecar proxy naming an upstream, and an
                     ingress gateway (whose entry linking web and a service without
                     instances is already written), then read them back in Consul's shapes

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import sys

from consul_rpc import check, plain_codec


def main():
    ip = sys.argv[1]
    sock, codec = plain_codec(ip)

    for service in (
        {"ID": "web-1", "Service": "web", "Port": 80},
        {"ID": "web-proxy", "Service": "web-proxy", "Port": 21000, "Kind": "connect-proxy",
         "Proxy": {"DestinationServiceName": "web",
                   "Upstreams": [{"DestinationName": "db", "LocalBindPort": 9000}]}},
        {"ID": "db-1", "Service": "db", "Port": 5432},
        {"ID": "gw", "Service": "gw", "Port": 8080, "Kind": "ingress-gateway"},
    ):
        answer = codec.ok("Catalog.Register", {
            "Datacenter": "dc1", "Node": "ui-node", "Address": "10.9.1.1", "Service": service})
        check(answer == {}, f"Catalog.Register answered {answer!r}")

    # IndexedNodesWithGateways: every instance, and the gateway's rows in Gateways.
    dump = codec.ok("Internal.ServiceDump", {"Datacenter": "dc1"})
    names = sorted(n["Service"]["Service"] for n in dump["Nodes"])
    check("web" in names and "gw" in names and "web-proxy" in names, f"Nodes {names!r}")
    linked = sorted(g["Service"]["Name"] for g in dump["Gateways"])
    check(linked == ["nowhere", "web"], f"Gateways {dump['Gateways']!r}")
    check(all(g["Gateway"]["Name"] == "gw" for g in dump["Gateways"]), f"{dump['Gateways']!r}")
    check(dump["ImportedNodes"] is None and dump["Index"] > 0, f"{dump!r}")
    # Filter over each CheckServiceNode.
    only_db = codec.ok("Internal.ServiceDump", {"Filter": "Service.Service == db"})
    check([n["Service"]["ID"] for n in only_db["Nodes"]] == ["db-1"], f"{only_db['Nodes']!r}")
    # A dump of one kind carries no gateway rows.
    gateways = codec.ok("Internal.ServiceDump", {
        "ServiceKind": "ingress-gateway", "UseServiceKind": True})
    check([n["Service"]["ID"] for n in gateways["Nodes"]] == ["gw"], f"{gateways!r}")
    check(gateways["Gateways"] is None, f"{gateways!r}")

    # IndexedServiceDump: a ServiceInfo per instance of each linked service; a linked
    # service without instances once, with only its GatewayService.
    services = codec.ok("Internal.GatewayServiceDump", {"ServiceName": "gw"})
    infos = {i["GatewayService"]["Service"]["Name"]: i for i in services["Dump"]}
    check(sorted(infos) == ["nowhere", "web"], f"Dump {services['Dump']!r}")
    web = infos["web"]
    check(web["Node"]["Node"] == "ui-node" and web["Service"]["ID"] == "web-1", f"{web!r}")
    check(web["GatewayService"]["Port"] == 8080, f"{web!r}")
    check(web["GatewayService"]["GatewayKind"] == "ingress-gateway", f"{web!r}")
    nowhere = infos["nowhere"]
    check(nowhere["Node"] is None and nowhere["Service"] is None, f"{nowhere!r}")
    none = codec.ok("Internal.GatewayServiceDump", {"ServiceName": "no-such-gateway"})
    check(none["Dump"] is None, f"{none!r}")

    # IndexedServiceTopology: web's proxy names db; db's downstream is web.
    web_topology = codec.ok("Internal.ServiceTopology", {"ServiceName": "web", "ServiceKind": ""})
    topology = web_topology["ServiceTopology"]
    check([n["Service"]["ID"] for n in topology["Upstreams"]] == ["db-1"], f"{topology!r}")
    check(topology["UpstreamSources"] == {"db": "proxy-registration"}, f"{topology!r}")
    decision = topology["UpstreamDecisions"]["db"]
    check(decision["Allowed"] is True and decision["DefaultAllow"] is True, f"{decision!r}")
    check(set(decision) == {"Allowed", "DefaultAllow", "ExternalSource", "HasExact",
                            "HasPermissions"}, f"{decision!r}")
    check(topology["TransparentProxy"] is False, f"{topology!r}")
    check(web_topology["FilteredByACLs"] is False, f"{web_topology!r}")
    db_topology = codec.ok("Internal.ServiceTopology", {"ServiceName": "db"})["ServiceTopology"]
    check(db_topology["DownstreamSources"] == {"web": "proxy-registration"}, f"{db_topology!r}")
    downstream_ids = sorted(n["Service"]["ID"] for n in db_topology["Downstreams"])
    check(downstream_ids == ["web-1", "web-proxy"], f"{db_topology!r}")
    error, _ = codec.call("Internal.ServiceTopology", {"ServiceName": "web", "ServiceKind": "x"})
    check(error == 'Unsupported service kind "x"', f"{error!r}")

    # Catalog.ListNodes with a Source of this datacenter: still every node.
    nodes = codec.ok("Catalog.ListNodes", {"Source": {"Datacenter": "dc1", "Node": "ui-node"}})
    check("ui-node" in [n["Node"] for n in nodes["Nodes"]], f"{nodes!r}")

    # Coordinate.Update: a coordinate of the server's dimensionality is stored.
    coordinate = {"Vec": [0.0] * 8, "Error": 1.5, "Adjustment": 0.0, "Height": 1e-5}
    stored = codec.ok("Coordinate.Update", {"Node": "ui-node", "Coord": coordinate})
    check(stored == {}, f"Coordinate.Update answered {stored!r}")
    error, _ = codec.call("Coordinate.Update", {"Node": "ui-node", "Coord": None})
    check(error != "", "a missing coordinate was accepted")
    sock.close()
    print("ok")


if __name__ == "__main__":
    main()
