#!/usr/bin/env python3
"""Consul's ConfigEntry.* calls on a server's RPC port (byte 0), written from Consul's
agent/structs/config_entry.go with no praetor code, using consul_rpc.py's codec.

A config entry is a Go interface, so the structs carrying one have their own
MarshalBinary, which go-msgpack writes as a raw string: ConfigEntryRequest is
[kind, request map]; ConfigEntryResponse [kind or "", entry, QueryMeta];
IndexedConfigEntries [count, kind, map with Entries]; IndexedGenericConfigEntries
[count, (kind, entry)..., QueryMeta]. A proxy-defaults entry is itself a raw string.

Usage:
  config_entry_rpc.py <ip>     apply, read, list, block, delete; refusals

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import sys
import threading
import time

import msgpack

from consul_rpc import check, fail, pack, plain_codec, text, SECOND


def binary(*values):
    """What a MarshalBinary writes: the values back to back, inside one raw string."""
    return b"".join(pack(v) for v in values)


def values_of(raw):
    """The values inside a MarshalBinary raw string."""
    unpacker = msgpack.Unpacker(raw=False, unicode_errors="surrogateescape", strict_map_key=False)
    unpacker.feed(text(raw))
    return list(unpacker)


def entry_map(value):
    """An entry: a map, or (proxy-defaults) a raw string holding one."""
    if isinstance(value, (bytes, str)):
        (inner,) = values_of(value)
        return inner
    return value


def apply_request(op, entry, token=""):
    return binary(
        entry["Kind"],
        {"Datacenter": "", "Entry": entry, "Op": op, "Token": token},
    )


def get(codec, kind, name, **options):
    reply = codec.ok("ConfigEntry.Get", {"Kind": kind, "Name": name, **options})
    values = values_of(reply)
    check(len(values) in (2, 3), f"ConfigEntryResponse {values!r}")
    if values[0] == "":
        return None, values[1]
    return entry_map(values[1]), values[2]


def main():
    ip = sys.argv[1]
    sock, codec = plain_codec(ip)
    web = {"Kind": "service-defaults", "Name": "rpc-web", "Protocol": "HTTP"}
    check(codec.ok("ConfigEntry.Apply", apply_request("upsert", web)) is True, "upsert")
    entry, meta = get(codec, "service-defaults", "rpc-web")
    check(entry["Kind"] == "service-defaults" and entry["Name"] == "rpc-web", f"{entry!r}")
    # Normalized on the server, as Consul's Normalize lowercases the protocol.
    check(entry["Protocol"] == "http", f"protocol {entry!r}")
    check(entry["ModifyIndex"] >= entry["CreateIndex"] > 0, f"indexes {entry!r}")
    check(meta["Index"] >= entry["ModifyIndex"] and meta["KnownLeader"], f"meta {meta!r}")
    index = entry["ModifyIndex"]

    # A CAS upsert with a stale index is refused, with the current one applied.
    stale = dict(web, Protocol="grpc", ModifyIndex=1)
    check(codec.ok("ConfigEntry.Apply", apply_request("upsert-cas", stale)) is False, "stale cas")
    fresh = dict(web, Protocol="grpc", ModifyIndex=index)
    check(codec.ok("ConfigEntry.Apply", apply_request("upsert-cas", fresh)) is True, "cas")

    # proxy-defaults travels wrapped in its own raw string, both ways.
    proxy = {"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}
    wrapped = binary("proxy-defaults", {"Entry": pack(proxy), "Op": "upsert"})
    check(codec.ok("ConfigEntry.Apply", wrapped) is True, "proxy-defaults upsert")
    proxy_reply = codec.ok("ConfigEntry.Get", {"Kind": "proxy-defaults", "Name": "global"})
    kind, proxy_entry, _ = values_of(proxy_reply)
    check(kind == "proxy-defaults" and isinstance(proxy_entry, (bytes, str)), f"{proxy_entry!r}")
    check(entry_map(proxy_entry)["Config"] == {"protocol": "http"}, f"{proxy_entry!r}")

    # A missing entry is an empty kind and QueryMeta alone.
    missing, meta = get(codec, "service-defaults", "nothing")
    check(missing is None and meta["Index"] > 0, f"missing {missing!r} {meta!r}")

    listed = values_of(codec.ok("ConfigEntry.List", {"Kind": "service-defaults"}))
    count, kind, body = listed
    check((count, kind, body["Kind"]) == (1, "service-defaults", "service-defaults"), f"{listed!r}")
    check(body["Entries"][0]["Protocol"] == "grpc", f"{listed!r}")
    every = values_of(
        codec.ok("ConfigEntry.ListAll", {"Kinds": ["proxy-defaults", "service-defaults"]})
    )
    check(every[0] == 2, f"ListAll {every!r}")
    kinds = [every[1], every[3]]
    check(sorted(kinds) == ["proxy-defaults", "service-defaults"], f"ListAll {every!r}")
    check(every[-1]["Index"] > 0, f"ListAll meta {every!r}")

    # A blocking Get is woken by a write on another connection.
    _, meta = get(codec, "service-defaults", "rpc-web")
    woken = {}

    def wait():
        _, other = plain_codec(ip)
        started = time.monotonic()
        woken["reply"] = get(
            other, "service-defaults", "rpc-web",
            MinQueryIndex=meta["Index"], MaxQueryTime=30 * SECOND,
        )
        woken["after"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1)
    check(waiter.is_alive(), "the blocking Get answered at once")
    changed = dict(web, Protocol="http2")
    check(codec.ok("ConfigEntry.Apply", apply_request("upsert", changed)) is True, "wake")
    waiter.join(20)
    check(not waiter.is_alive(), "the blocking Get was never woken")
    check(woken["reply"][0]["Protocol"] == "http2", f"woken {woken!r}")

    # Refusals in Consul's words.
    error, _ = codec.call("ConfigEntry.Get", {"Kind": "frob", "Name": "x"})
    check(error == "invalid config entry kind: frob", f"bad kind {error!r}")
    bad = {"Kind": "service-defaults", "Name": ""}
    error, _ = codec.call("ConfigEntry.Apply", apply_request("upsert", bad))
    check(error == "Name is required", f"no name {error!r}")
    error, _ = codec.call("ConfigEntry.Frob", {})
    check(error == "rpc: can't find method ConfigEntry.Frob", f"unknown method {error!r}")

    # Deletes: a stale delete-cas is refused; a plain delete removes it.
    _, meta = get(codec, "service-defaults", "rpc-web")
    stale = {"Kind": "service-defaults", "Name": "rpc-web", "ModifyIndex": 1}
    reply = codec.ok("ConfigEntry.Delete", apply_request("delete-cas", stale))
    check(reply == {"Deleted": False}, f"stale delete-cas {reply!r}")
    gone = {"Kind": "service-defaults", "Name": "rpc-web"}
    codec.ok("ConfigEntry.Delete", apply_request("delete", gone))
    missing, _ = get(codec, "service-defaults", "rpc-web")
    check(missing is None, f"deleted entry still there {missing!r}")
    sock.close()
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # a crash is a failure with its reason
        fail(f"{type(error).__name__}: {error}")
