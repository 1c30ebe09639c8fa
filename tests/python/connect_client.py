"""Service mesh through py-consul against a praetor agent: config entries, intentions,
the built-in CA, leaf certificates, authorize, sidecar registration and discovery chains.

Usage: connect_client.py HOST PORT. Exits non-zero with a message on the first mismatch.
"""
import sys
import time

import consul


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def eventually(probe, message, seconds=10.0):
    deadline = time.time() + seconds
    while True:
        value = probe()
        if value:
            return value
        if time.time() > deadline:
            check(False, message)
        time.sleep(0.1)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)

    # Config entries.
    check(c.config.set("proxy-defaults", "global", {"Config": {"protocol": "http"}}) is True, "proxy-defaults set")
    check(c.config.set("service-defaults", "web", {"Protocol": "http"}) is True, "service-defaults set")
    entry = c.config.get("service-defaults", "web")
    check(entry["Kind"] == "service-defaults" and entry["Protocol"] == "http", "get: %r" % entry)
    entries = c.config.list("service-defaults")
    check([e["Name"] for e in entries] == ["web"], "list: %r" % entries)
    stale = entry["ModifyIndex"] - 1
    check(c.config.set("service-defaults", "web", {"Protocol": "tcp"}, cas=stale) is False, "cas mismatch")
    check(c.config.set("service-defaults", "web", {"Protocol": "http"}, cas=entry["ModifyIndex"]) is True, "cas")
    check(c.config.set("service-defaults", "db", {"Protocol": "tcp"}) is True, "db defaults")
    check(c.config.delete("service-defaults", "db") is True, "delete")
    gone = c.config.get("service-defaults", "db")
    check(gone is None, "deleted entry reads as 404: %r" % gone)

    # Discovery chain.
    chain = c.discovery_chain.get("web")
    chain = chain["Chain"]
    check(chain["ServiceName"] == "web" and chain["Protocol"] == "http", "chain: %r" % chain)
    check(chain["StartNode"] == "resolver:web.default.default.dc1", "start node: %r" % chain)
    chain = c.discovery_chain.get("web", override_connect_timeout="7s")
    target = chain["Chain"]["Targets"]["web.default.default.dc1"]
    check(target["ConnectTimeout"] == "7s", "override: %r" % target)

    # Intentions: exact upserts, check, match, list.
    check(c.connect.intentions.upsert("web", "db", action="deny") is True, "upsert deny")
    check(c.connect.intentions.upsert("*", "db", action="allow") is True, "upsert wildcard")
    exact = c.connect.intentions.read("web", "db")
    check(exact["Action"] == "deny" and exact["Precedence"] == 9, "exact: %r" % exact)
    allowed = c.connect.intentions.check("web", "db")
    check(allowed is False, "web -> db denied")
    allowed = c.connect.intentions.check("api", "db")
    check(allowed is True, "api -> db allowed by the wildcard")
    matches = c.connect.intentions.match("destination", "db")
    check([i["SourceName"] for i in matches["db"]] == ["web", "*"], "match order: %r" % matches)
    listed = c.connect.intentions.list()
    check(len(listed) == 2, "list: %r" % listed)

    # The built-in CA.
    roots = c.connect.ca.roots()
    check(len(roots["Roots"]) == 1 and roots["Roots"][0]["Active"], "roots: %r" % roots)
    trust_domain = roots["TrustDomain"]
    check(trust_domain.endswith(".consul"), "trust domain: %r" % trust_domain)
    config = c.connect.ca.configuration()
    check(config["Provider"] == "consul", "ca config: %r" % config)
    agent_roots = c.agent.connect.ca.roots()
    check(agent_roots["ActiveRootID"] == roots["ActiveRootID"], "agent roots: %r" % agent_roots)

    # Sidecar registration, then the leaf certificate for the service.
    check(
        c.agent.service.register("web", service_id="web", port=8080, connect={"sidecar_service": {}}) is True,
        "register with sidecar",
    )
    services = c.agent.services()
    sidecar = services.get("web-sidecar-proxy")
    check(sidecar is not None and sidecar["Kind"] == "connect-proxy", "sidecar: %r" % list(services))
    check(sidecar["Proxy"]["DestinationServiceName"] == "web", "proxy: %r" % sidecar["Proxy"])
    check(sidecar["Proxy"]["LocalServicePort"] == 8080, "local port: %r" % sidecar["Proxy"])
    check(21000 <= sidecar["Port"] <= 21255, "sidecar port: %r" % sidecar["Port"])
    eventually(lambda: c.catalog.connect("web")[1], "sidecar synced to catalog.connect")
    _, via_health = c.health.connect("web")
    check(via_health[0]["Service"]["ID"] == "web-sidecar-proxy", "health.connect: %r" % via_health)

    leaf = c.agent.connect.ca.leaf("web")
    check(leaf["Service"] == "web", "leaf: %r" % leaf)
    check(leaf["ServiceURI"] == "spiffe://%s/ns/default/dc/dc1/svc/web" % trust_domain, "uri: %r" % leaf)
    check(leaf["CertPEM"].startswith("-----BEGIN CERTIFICATE-----"), "cert pem")
    check("PRIVATE KEY" in leaf["PrivateKeyPEM"], "key pem")

    # Authorize with the leaf's identity against the intentions above.
    result = c.agent.connect.authorize("db", leaf["ServiceURI"], leaf["SerialNumber"])
    check(result["Authorized"] is False, "web -> db denied: %r" % result)
    check(c.connect.intentions.delete("web", "db") is True, "delete exact")
    result = c.agent.connect.authorize("db", leaf["ServiceURI"], leaf["SerialNumber"])
    check(result["Authorized"] is True, "wildcard allows after delete: %r" % result)
    check("*" in result["Reason"], "reason names the matched intention: %r" % result)

    check(c.agent.service.deregister("web") is True, "deregister")
    services = c.agent.services()
    check("web-sidecar-proxy" not in services, "sidecar removed with its parent: %r" % list(services))
    print("ok")


if __name__ == "__main__":
    main()
