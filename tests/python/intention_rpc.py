#!/usr/bin/env python3
"""Consul's Intention.* calls on a server's RPC port (byte 0), written from Consul's
agent/structs/intention.go with no praetor code, using consul_rpc.py's codec.

IntentionRequest is {Datacenter, Op, Intention, Token}; an Intention is a map keyed by
Go's field names, CreatedAt and UpdatedAt as time.Time's MarshalBinary bytes.
IntentionQueryRequest carries IntentionID, Exact, Match or Check next to QueryOptions;
the replies are IndexedIntentions {Intentions, QueryMeta...}, IndexedIntentionMatches
{Matches} and IntentionQueryCheckResponse {Allowed}.

Usage:
  intention_rpc.py <ip>     create, check, get, match, list, delete; refusals

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import struct
import sys

from consul_rpc import check, fail, plain_codec, text


def string(value):
    """A string the server sent, as text."""
    return text(value).decode("utf-8")


def go_time(raw):
    """Unix seconds of a time.Time's MarshalBinary bytes (0 for Go's zero time)."""
    raw = text(raw)
    check(len(raw) in (15, 16) and raw[0] in (1, 2), f"time.Time bytes {raw!r}")
    seconds, = struct.unpack(">q", raw[1:9])
    return 0 if seconds == 0 else seconds - 62_135_596_800


def intention(source, destination, action, **more):
    return {
        "SourceNS": "default", "SourceName": source,
        "DestinationNS": "default", "DestinationName": destination,
        "SourceType": "consul", "Action": action, **more,
    }


def apply(codec, op, ixn):
    return codec.ok("Intention.Apply", {"Datacenter": "", "Op": op, "Intention": ixn, "Token": ""})


def allowed(codec, source, destination):
    reply = codec.ok("Intention.Check", {"Check": {
        "SourceNS": "default", "SourceName": source,
        "DestinationNS": "default", "DestinationName": destination, "SourceType": "consul",
    }})
    return reply["Allowed"]


def main():
    ip = sys.argv[1]
    sock, codec = plain_codec(ip)

    # ACLs are off on a dev agent: nothing matching is allowed.
    check(allowed(codec, "web", "rpc-db") is True, "default allow")
    ixn_id = apply(codec, "create", intention("web", "rpc-db", "deny", Meta={"team": "a"}))
    ixn_id = string(ixn_id)
    check(len(ixn_id) == 36, f"create {ixn_id!r}")
    check(allowed(codec, "web", "rpc-db") is False, "the deny intention decides")
    check(allowed(codec, "other", "rpc-db") is True, "another source is not matched")

    reply = codec.ok("Intention.Get", {"IntentionID": ixn_id})
    (got,) = reply["Intentions"]
    check((got["ID"], got["SourceName"], got["DestinationName"], got["Action"])
          == (ixn_id, "web", "rpc-db", "deny"), f"get {got!r}")
    check(got["Meta"] == {"team": "a"} and got["Precedence"] == 9, f"get {got!r}")
    check(go_time(got["CreatedAt"]) > 1_600_000_000, f"CreatedAt {got['CreatedAt']!r}")
    check(got["ModifyIndex"] >= got["CreateIndex"] > 0, f"indexes {got!r}")
    check(reply["Index"] > 0 and reply["KnownLeader"], f"meta {reply!r}")
    exact = codec.ok("Intention.Get", {"Exact": {
        "SourceNS": "default", "SourceName": "web",
        "DestinationNS": "default", "DestinationName": "rpc-db",
    }})
    check(exact["Intentions"][0]["ID"] == ixn_id, f"exact {exact!r}")

    matches = codec.ok("Intention.Match", {"Match": {"Type": "destination", "Entries": [
        {"Namespace": "default", "Name": "rpc-db"}, {"Namespace": "default", "Name": "none"},
    ]}})
    check(len(matches["Matches"]) == 2, f"match {matches!r}")
    check([i["ID"] for i in matches["Matches"][0]] == [ixn_id], f"match {matches!r}")
    check(not matches["Matches"][1], f"match of none {matches!r}")
    listed = codec.ok("Intention.List", {"Legacy": True})
    check(ixn_id in [i["ID"] for i in listed["Intentions"]], f"list {listed!r}")

    # An upsert by name, then an update by ID that keeps its destination.
    check(string(apply(codec, "upsert", intention("api", "rpc-cache", "deny"))) == "", "upsert")
    check(allowed(codec, "api", "rpc-cache") is False, "upserted deny")
    updated = apply(codec, "update", intention("web", "rpc-db", "allow", ID=ixn_id))
    check(string(updated) == ixn_id, f"update {updated!r}")
    check(allowed(codec, "web", "rpc-db") is True, "updated to allow")

    # Refusals in Consul's words.
    error, _ = codec.call("Intention.Apply", {"Op": "create", "Intention": intention("a", "b", "")})
    check("Action must be set to 'allow' or 'deny'" in error, f"no action {error!r}")
    error, _ = codec.call("Intention.Get", {"IntentionID": "0a1b2c3d-0000-0000-0000-000000000000"})
    check(error == "Intention not found", f"missing {error!r}")
    error, _ = codec.call("Intention.Frob", {})
    check(error == "rpc: can't find method Intention.Frob", f"unknown method {error!r}")

    # Deletes: by ID, then by name.
    apply(codec, "delete", {"ID": ixn_id})
    error, _ = codec.call("Intention.Get", {"IntentionID": ixn_id})
    check(error == "Intention not found", f"deleted {error!r}")
    apply(codec, "delete", intention("api", "rpc-cache", ""))
    listed = codec.ok("Intention.List", {})
    check(not listed["Intentions"], f"left after deletes {listed!r}")
    sock.close()
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # a crash is a failure with its reason
        fail(f"{type(error).__name__}: {error}")
