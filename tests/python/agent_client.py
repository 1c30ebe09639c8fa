"""Agent services and checks through py-consul against a praetor agent.

Usage: agent_client.py HOST PORT. Exits non-zero with a message on the first mismatch.
"""
import sys
import time

import consul


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)

    me = c.agent.self()
    node = me["Config"]["NodeName"]
    check(me["Config"]["Version"] == "1.22.0", "agent self version: %r" % me["Config"])

    ok = c.agent.service.register(
        "billing", service_id="billing-1", port=8080, tags=["v1"], meta={"team": "pay"},
        check=consul.Check.ttl("30s"),
    )
    check(ok is True, "service register returns True")
    services = c.agent.services()
    check(services["billing-1"]["Service"] == "billing", "agent.services: %r" % services)
    check(services["billing-1"]["Meta"] == {"team": "pay"}, "meta: %r" % services["billing-1"])
    checks = c.agent.checks()
    check(checks["service:billing-1"]["Status"] == "critical", "ttl checks start critical: %r" % checks)

    check(c.agent.check.ttl_pass("service:billing-1", notes="all good") is True, "ttl_pass")
    checks = c.agent.checks()
    check(checks["service:billing-1"]["Status"] == "passing", "after ttl_pass: %r" % checks)
    check(checks["service:billing-1"]["Output"] == "all good", "ttl note: %r" % checks)
    _, healthy = c.health.service("billing", passing=True)
    check(len(healthy) == 1 and healthy[0]["Node"]["Node"] == node, "synced to the catalog: %r" % healthy)

    check(c.agent.check.ttl_warn("service:billing-1", notes="slow") is True, "ttl_warn")
    check(c.agent.checks()["service:billing-1"]["Status"] == "warning", "warning")
    check(c.agent.check.ttl_fail("service:billing-1") is True, "ttl_fail")
    _, passing = c.health.service("billing", passing=True)
    check(passing == [], "critical drops it: %r" % passing)

    # A node-level check and a check attached to the service.
    check(c.agent.check.register("disk", check=consul.Check.ttl("30s"), check_id="disk") is True, "check register")
    check(
        c.agent.check.register("billing-extra", check=consul.Check.ttl("30s"), service_id="billing-1") is True,
        "service check register",
    )
    checks = c.agent.checks()
    check("disk" in checks and checks["billing-extra"]["ServiceID"] == "billing-1", "checks: %r" % list(checks))
    check(c.agent.check.deregister("billing-extra") is True, "check deregister")
    check("billing-extra" not in c.agent.checks(), "check gone")

    # Maintenance, node and service.
    check(c.agent.service.maintenance("billing-1", True, "deploy") is True, "service maintenance on")
    check("_service_maintenance:billing-1" in c.agent.checks(), "maintenance check present")
    check(c.agent.service.maintenance("billing-1", False) is True, "service maintenance off")
    check(c.agent.maintenance(True, "kernel") is True, "node maintenance on")
    check(c.agent.checks()["_node_maintenance"]["Notes"] == "kernel", "node maintenance notes")
    check(c.agent.maintenance(False) is True, "node maintenance off")
    check("_node_maintenance" not in c.agent.checks(), "node maintenance gone")

    members = c.agent.members()
    check(any(m["Name"] == node for m in members), "members: %r" % members)
    metrics = c.agent.metrics()
    # Gauges carry the host name, as Consul's do unless telemetry.disable_hostname is set.
    check(any(g["Name"].startswith("consul.") and g["Name"].endswith(".agent.local.services")
              for g in metrics["Gauges"]), "metrics: %r" % metrics)

    check(c.agent.service.deregister("billing-1") is True, "service deregister")
    check("billing-1" not in c.agent.services(), "service gone")
    _, rows = c.catalog.service("billing")
    check(rows == [], "gone from the catalog: %r" % rows)
    print("ok")


if __name__ == "__main__":
    main()
