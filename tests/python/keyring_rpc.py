#!/usr/bin/env python3
"""Consul's Internal.KeyringOperation on a server's RPC port (byte 0), written from
Consul's agent/structs/structs.go (KeyringRequest, KeyringResponses, KeyringResponse) and
agent/consul/internal_endpoint.go with no praetor code, using consul_rpc.py's codec.

Usage:
  keyring_rpc.py <ip> <key>   list a one-server datacenter's keyrings (gossip encrypted
                              with <key>), forwarded and local-only lists, refusals

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import sys

from consul_rpc import check, fail, plain_codec

RESPONSE_FIELDS = {
    "WAN", "Datacenter", "Segment", "Partition", "Messages", "Keys", "PrimaryKeys",
    "NumNodes", "Error",
}


def one_pool(response, wan, key):
    """A KeyringResponse of a healthy one-member pool encrypted with `key` alone."""
    check(set(response) == RESPONSE_FIELDS, f"KeyringResponse fields {sorted(response)}")
    check(response["WAN"] is wan, f"WAN {response!r}")
    check(response["Datacenter"] == "dc1", f"Datacenter {response!r}")
    check(response["Segment"] == "" and response["Error"] == "", f"{response!r}")
    check(response["NumNodes"] == 1, f"NumNodes {response!r}")
    check(response["Keys"] == {key: 1}, f"Keys {response!r}")
    check(response["PrimaryKeys"] == {key: 1}, f"PrimaryKeys {response!r}")


def main():
    ip, key = sys.argv[1], sys.argv[2]
    sock, codec = plain_codec(ip)

    # The agent's request: no datacenter, not forwarded. The server lists its WAN pool,
    # then its LAN pool (no other datacenter here).
    reply = codec.ok("Internal.KeyringOperation", {"Operation": "list", "RelayFactor": 0})
    check(isinstance(reply, dict) and "Responses" in reply, f"KeyringResponses {reply!r}")
    wan, lan = reply["Responses"]
    one_pool(wan, True, key)
    one_pool(lan, False, key)

    # Forwarded (as a server hands it to another datacenter) and LocalOnly: the LAN pool only.
    for body in ({"Operation": "list", "Forwarded": True}, {"Operation": "list", "LocalOnly": True}):
        (only,) = codec.ok("Internal.KeyringOperation", body)["Responses"]
        one_pool(only, False, key)

    # A failure over a pool is that pool's Error, not the call's: removing the primary key
    # is refused by the member.
    reply = codec.ok("Internal.KeyringOperation", {"Operation": "remove", "Key": key})
    for response in reply["Responses"]:
        check(response["Error"] == "1/1 nodes reported failure", f"remove primary {response!r}")
        (message,) = response["Messages"].values()
        check("primary" in message.lower(), f"the member's message {response!r}")

    # LocalOnly is for lists only, in Consul's words.
    error, body = codec.call(
        "Internal.KeyringOperation", {"Operation": "install", "Key": key, "LocalOnly": True}
    )
    check(
        error == "argument error: LocalOnly can only be used for List operations",
        f"local-only install answered {error!r}",
    )
    check(body == {}, f"an error's body is net/rpc's empty struct, got {body!r}")
    sock.close()
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # a crash is a failure with its reason
        fail(f"{type(error).__name__}: {error}")
