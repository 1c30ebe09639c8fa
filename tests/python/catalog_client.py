"""Catalog and health through py-consul against a praetor agent.

Usage: catalog_client.py HOST PORT. Exits non-zero with a message on the first mismatch.
"""
import sys
import threading
import time

import consul


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)

    check(c.catalog.datacenters() == ["dc1"], "datacenters")
    ok = c.catalog.register(
        "py-node",
        "10.9.8.7",
        service={"Service": "redis", "ID": "redis-1", "Tags": ["primary", "v6"], "Port": 6379},
        check={"Name": "redis alive", "CheckID": "redis-check", "ServiceID": "redis-1", "Status": "passing"},
    )
    check(ok is True, "catalog register returns True")
    c.catalog.register("py-node-2", "10.9.8.8", service={"Service": "redis", "ID": "redis-2", "Tags": ["replica"], "Port": 6380})

    index, nodes = c.catalog.nodes()
    names = sorted(n["Node"] for n in nodes)
    check("py-node" in names and "py-node-2" in names, "nodes: %r" % names)
    check(int(index) > 0, "nodes index")
    # Only the agent's own node carries agent metadata (anti-entropy registers it shortly
    # after the agent starts).
    me = c.agent.self()["Config"]["NodeName"]
    # Bounded generously: on a loaded machine the first sync can take seconds.
    deadline = time.time() + 30
    while time.time() < deadline and not c.catalog.nodes(node_meta={"consul-version": "1.22.0"})[1]:
        time.sleep(0.05)
    _, nodes = c.catalog.nodes(node_meta={"consul-version": "1.22.0"})
    check([n["Node"] for n in nodes] == [me], "node-meta filter: %r" % nodes)

    _, services = c.catalog.services()
    check(sorted(services["redis"]) == ["primary", "replica", "v6"], "services: %r" % services)

    _, instances = c.catalog.service("redis")
    check(sorted(i["ServiceID"] for i in instances) == ["redis-1", "redis-2"], "catalog.service: %r" % instances)
    _, primaries = c.catalog.service("redis", tag="primary")
    check([i["ServiceID"] for i in primaries] == ["redis-1"], "tag filter: %r" % primaries)
    check(primaries[0]["ServicePort"] == 6379 and primaries[0]["Address"] == "10.9.8.7", "row fields: %r" % primaries[0])

    _, node = c.catalog.node("py-node")
    check(node["Node"]["Address"] == "10.9.8.7", "catalog.node: %r" % node)
    check("redis-1" in node["Services"], "catalog.node services: %r" % node)

    # Health: the instance without checks passes; the checked one too until its check fails.
    index, healthy = c.health.service("redis", passing=True)
    check(len(healthy) == 2, "health.service passing: %r" % healthy)
    _, checks = c.health.checks("redis")
    check([x["CheckID"] for x in checks] == ["redis-check"], "health.checks: %r" % checks)
    _, state = c.health.state("passing")
    check(any(x["CheckID"] == "redis-check" for x in state), "health.state: %r" % state)
    _, node_checks = c.health.node("py-node")
    check([x["CheckID"] for x in node_checks] == ["redis-check"], "health.node: %r" % node_checks)

    # A blocking health query wakes when the service's check fails: it returns with the new
    # index and answer well before its wait runs out. (Not a latency bound: how long the
    # write and the wake take depends on the machine's load, which is not what is tested.)
    result = {}
    wait_s = 30

    def watch():
        result["value"] = c.health.service("redis", passing=True, index=index, wait="%ds" % wait_s)

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.3)
    started = time.time()
    c.catalog.register(
        "py-node",
        "10.9.8.7",
        check={"Name": "redis alive", "CheckID": "redis-check", "ServiceID": "redis-1", "Status": "critical"},
        skip_node_update=True,
    )
    thread.join(wait_s + 15)
    check(not thread.is_alive(), "the blocking query returned")
    new_index, passing = result["value"]
    check(int(new_index) > int(index), "index moved")
    check([x["Service"]["ID"] for x in passing] == ["redis-2"], "critical instance dropped: %r" % passing)
    check(time.time() - started < wait_s / 2, "woke on the change, not at the end of its wait")

    check(c.catalog.deregister("py-node", service_id="redis-1") is True, "deregister service")
    _, instances = c.catalog.service("redis")
    check([i["ServiceID"] for i in instances] == ["redis-2"], "after deregister: %r" % instances)
    check(c.catalog.deregister("py-node-2") is True, "deregister node")
    _, node = c.catalog.node("py-node-2")
    check(node is None, "node gone: %r" % node)
    print("ok")


if __name__ == "__main__":
    main()
