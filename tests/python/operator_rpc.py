#!/usr/bin/env python3
"""Consul's Operator.* and ConnectCA.Configuration* calls on a server's RPC port (byte 0),
written from Consul's agent/structs/operator.go, autopilot.go, connect_ca.go and
raft-autopilot's types.go with no praetor code, using consul_rpc.py's codec.

Usage:
  operator_rpc.py <ip>     read the Raft configuration, autopilot, the CA configuration;
                           set them; refusals

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import sys

from consul_rpc import check, fail, plain_codec, SECOND


def main():
    ip = sys.argv[1]
    sock, codec = plain_codec(ip)

    # RaftConfigurationResponse: {Servers: [RaftServer], Index}.
    raft = codec.ok("Operator.RaftGetConfiguration", {"Datacenter": "dc1"})
    check(isinstance(raft, dict) and raft["Index"] > 0, f"RaftConfigurationResponse {raft!r}")
    (server,) = raft["Servers"]
    check(server["Address"] == f"{ip}:8300", f"address {server!r}")
    check(server["Leader"] is True and server["Voter"] is True, f"leader {server!r}")
    check(server["ProtocolVersion"] == "3" and server["Node"], f"server {server!r}")
    check(isinstance(server["LastIndex"], int), f"last index {server!r}")

    # AutopilotConfig: durations in nanoseconds.
    config = codec.ok("Operator.AutopilotGetConfiguration", {"Datacenter": "dc1"})
    check(config["LastContactThreshold"] == 200_000_000, f"AutopilotConfig {config!r}")
    check(config["ServerStabilizationTime"] == 10 * SECOND, f"AutopilotConfig {config!r}")
    check(config["CleanupDeadServers"] is True and config["ModifyIndex"] > 0, f"{config!r}")
    # A check-and-set on a stale ModifyIndex answers false; on the current one true.
    stale = dict(config, MinQuorum=3, ModifyIndex=config["ModifyIndex"] - 1)
    answer = codec.ok("Operator.AutopilotSetConfiguration", {"Config": stale, "CAS": True})
    check(answer is False, f"stale CAS answered {answer!r}")
    fresh = dict(config, MinQuorum=3)
    answer = codec.ok("Operator.AutopilotSetConfiguration", {"Config": fresh, "CAS": True})
    check(answer is True, f"CAS answered {answer!r}")
    changed = codec.ok("Operator.AutopilotGetConfiguration", {})
    check(changed["MinQuorum"] == 3 and changed["ModifyIndex"] > config["ModifyIndex"], f"{changed!r}")
    # A plain set: Consul's FSM reports nothing, so the reply is false.
    plain = dict(changed, MinQuorum=0)
    answer = codec.ok("Operator.AutopilotSetConfiguration", {"Config": plain})
    check(answer is False, f"plain set answered {answer!r}")

    # AutopilotHealthReply: SerfStatus is serf's MemberStatus (1 is alive), StableSince a
    # Go time.
    health = codec.ok("Operator.ServerHealth", {})
    check(health["Healthy"] in (True, False) and "FailureTolerance" in health, f"{health!r}")
    (one,) = health["Servers"]
    check(one["SerfStatus"] == 1 and one["Leader"] is True, f"server health {one!r}")
    check(isinstance(one["StableSince"], (bytes, str)), f"StableSince {one!r}")
    # raft-autopilot's State: servers keyed by ID.
    state = codec.ok("Operator.AutopilotState", {})
    check(state["Leader"] == one["ID"] and state["Voters"] == [one["ID"]], f"State {state!r}")
    server_state = state["Servers"][one["ID"]]
    check(server_state["State"] == "leader", f"ServerState {server_state!r}")
    check(server_state["Server"]["NodeStatus"] == "alive", f"ServerState {server_state!r}")

    # Removing a peer that is not in the configuration: Consul's words.
    error, reply = codec.call("Operator.RaftRemovePeerByAddress", {"Address": "10.9.9.9:8300"})
    check(
        error == 'address "10.9.9.9:8300" was not found in the Raft configuration',
        f"remove peer answered {error!r}",
    )
    check(reply == {}, f"an error's body is net/rpc's empty struct, got {reply!r}")

    # CAConfiguration: Config a free map, durations as text.
    ca = codec.ok("ConnectCA.ConfigurationGet", {"Datacenter": "dc1"})
    check(ca["Provider"] == "consul" and ca["ClusterID"], f"CAConfiguration {ca!r}")
    check(ca["Config"]["LeafCertTTL"] == "72h", f"CAConfiguration {ca!r}")
    request = {
        "Op": "set-config",
        "Config": {"Provider": "consul", "Config": {"LeafCertTTL": "36h"}},
    }
    check(codec.ok("ConnectCA.ConfigurationSet", request) is None, "ConfigurationSet")
    ca = codec.ok("ConnectCA.ConfigurationGet", {})
    check(ca["Config"] == {"LeafCertTTL": "36h"}, f"after set {ca!r}")
    bad = {"Op": "set-config", "Config": {"Provider": "vault", "Config": {}}}
    error, _ = codec.call("ConnectCA.ConfigurationSet", bad)
    check(
        error == 'could not initialize provider: unknown CA provider "vault"',
        f"unknown provider answered {error!r}",
    )
    error, _ = codec.call("Operator.Frob", {})
    check(error == "rpc: can't find method Operator.Frob", f"unknown method {error!r}")
    sock.close()
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # a crash is a failure with its reason
        fail(f"{type(error).__name__}: {error}")
