"""Raw msgpack-rpc calls of ACL.ReplicationStatus (new) and ACL.PolicyList on a dc1
server's port, each once for dc1 and once naming dc2 (the server hands the call there), for
tests/it/federation/acl_dc_calls.rs. Prints what the test compares as one JSON line, and
exits non-zero if an answer is not shaped as Consul's."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consul_rpc import check, plain_codec  # noqa: E402

# Go's time.Time{}.MarshalBinary(): version 1, second 0 of year 1, UTC.
GO_ZERO_TIME = bytes([1] + [0] * 12 + [0xFF, 0xFF])


def as_bytes(value):
    """A []byte that the codec's unpacker read as text (surrogate-escaped)."""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


def main():
    server, management = sys.argv[1], sys.argv[2]
    sock, codec = plain_codec(server)
    printed = {}
    for datacenter in ("dc1", "dc2"):
        # No token: the status needs none, as Consul's.
        status = codec.ok("ACL.ReplicationStatus", {"Datacenter": datacenter})
        fields = {"Enabled", "Running", "SourceDatacenter", "ReplicationType",
                  "ReplicatedIndex", "ReplicatedRoleIndex", "ReplicatedTokenIndex",
                  "LastSuccess", "LastError", "LastErrorMessage"}
        check(set(status) == fields, f"ACLReplicationStatus fields: {sorted(status)}")
        for time_field in ("LastSuccess", "LastError"):
            check(as_bytes(status[time_field]) == GO_ZERO_TIME,
                  f"{time_field}: {status[time_field]!r} is not Go's zero time")
        printed[f"status-{datacenter}"] = {
            k: v for k, v in status.items() if k not in ("LastSuccess", "LastError")
        }
        policies = codec.ok("ACL.PolicyList", {"Datacenter": datacenter, "Token": management})
        printed[f"policies-{datacenter}"] = sorted(p["Name"] for p in policies["Policies"])
    error, _ = codec.call("ACL.ReplicationStatus", {"Datacenter": "dc9"})
    printed["dc9"] = error
    sock.close()
    print(json.dumps(printed, sort_keys=True))


if __name__ == "__main__":
    main()
