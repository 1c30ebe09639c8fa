#!/usr/bin/env python3
"""Native TLS on Consul's server port, as WAN federation through mesh gateways dials it:
no type byte, the connection opens with a TLS ClientHello whose ALPN protocol names what
follows (Consul's `agent/pool/conn.go` names: consul/rpc-single is one msgpack net/rpc
codec, consul/rpc-multi is yamux). Written from Consul's documented wire with the standard
library's ssl module and msgpack; the codec and yamux client are consul_rpc.py's.

Usage:
  consul_native_tls.py direct <ip> <ca> <cert> <key> <node> <dc>
      the server's own port: both ALPN protocols answer, the certificate names
      <node>.server.<dc>.consul; an unspoken protocol, WAN gossip (the server does not
      federate through gateways), a wrong one, none at all and a missing client
      certificate get no answer
  consul_native_tls.py through <ip:port> <sni> <ca> <cert> <key>
      a gateway: with <sni> as the server name, Status.Ping answers and the certificate
      presented is valid for <sni>
  consul_native_tls.py refused <ip:port> <sni> <ca> <cert> <key>
      a gateway: a connection with <sni> gets no TLS session

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import os
import socket
import ssl
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consul_rpc import Codec, Yamux, check, fail, kv_get, kv_set, entry_value  # noqa: E402

PORT = 8300
TIMEOUT_S = 30


def context(ca, cert, key, protocols):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    if protocols:
        ctx.set_alpn_protocols(protocols)
    return ctx


def open_tls(address, sni, ctx):
    raw = socket.create_connection(address, timeout=TIMEOUT_S)
    return ctx.wrap_socket(raw, server_hostname=sni)


def no_answer(sock, request, what):
    """Sends `request`; the server must close (or fail the session) without answering."""
    try:
        sock.sendall(request)
        sock.settimeout(10)
        data = sock.recv(65536)
    except socket.timeout:
        fail(f"{what}: the server kept the connection open")
    except (ssl.SSLError, ConnectionError, OSError):
        data = b""
    sock.close()
    check(data == b"", f"{what}: the server answered {data!r}")


def ping_request():
    import msgpack

    return msgpack.packb({"ServiceMethod": "Status.Ping", "Seq": 1}) + msgpack.packb({})


def single(address, sni, ca, cert, key):
    sock = open_tls(address, sni, context(ca, cert, key, ["consul/rpc-single"]))
    negotiated = sock.selected_alpn_protocol()
    check(negotiated == "consul/rpc-single", f"negotiated {negotiated!r}")
    codec = Codec(sock.sendall, lambda: sock.recv(65536))
    check(codec.ok("Status.Ping", {}) == {}, "Status.Ping replied something")
    return sock, codec


def multi(address, sni, ca, cert, key):
    sock = open_tls(address, sni, context(ca, cert, key, ["consul/rpc-multi"]))
    check(sock.selected_alpn_protocol() == "consul/rpc-multi", "rpc-multi negotiated")
    session = Yamux(sock)
    first, second = session.open().codec(), session.open().codec()
    check(first.ok("Status.Ping", {}) == {}, "Status.Ping on stream 1")
    kv_set(first, "native/multi", b"two streams")
    check(entry_value(kv_get(second, "native/multi")) == b"two streams", "yamux streams")
    sock.close()


def direct(ip, ca, cert, key, node, dc):
    address = (ip, PORT)
    # The certificate must carry <node>.server.<dc>.consul (tls cert create -node): the
    # client checks the name it asked for.
    sni = f"{node}.server.{dc}.consul"
    sock, codec = single(address, sni, ca, cert, key)
    kv_set(codec, "native/single", b"one codec")
    check(entry_value(kv_get(codec, "native/single")) == b"one codec", "KVS over rpc-single")
    sock.close()
    multi(address, sni, ca, cert, key)
    # A Consul protocol praetor does not speak: the handshake completes, then the close.
    grpc = context(ca, cert, key, ["consul/rpc-grpc"])
    sock = open_tls(address, sni, grpc)
    check(sock.selected_alpn_protocol() == "consul/rpc-grpc", "gRPC negotiated")
    no_answer(sock, ping_request(), "consul/rpc-grpc")
    # WAN gossip, to a server that does not federate through mesh gateways: the same.
    packet = context(ca, cert, key, ["consul/wan-gossip/packet"])
    sock = open_tls(address, sni, packet)
    check(sock.selected_alpn_protocol() == "consul/wan-gossip/packet", "gossip negotiated")
    no_answer(sock, struct.pack(">I", 4) + b"ping", "consul/wan-gossip/packet")
    # No ALPN at all: nothing selects a protocol.
    sock = open_tls(address, sni, context(ca, cert, key, None))
    check(sock.selected_alpn_protocol() is None, "no ALPN negotiated")
    no_answer(sock, ping_request(), "no ALPN")
    # A protocol that is none of Consul's: the handshake itself fails.
    try:
        sock = open_tls(address, sni, context(ca, cert, key, ["h2"]))
        no_answer(sock, ping_request(), "ALPN h2")
    except (ssl.SSLError, ConnectionError):
        pass
    # No client certificate: refused, verify_incoming or not.
    try:
        sock = open_tls(address, sni, context(ca, None, None, ["consul/rpc-single"]))
        no_answer(sock, ping_request(), "no client certificate")
    except (ssl.SSLError, ConnectionError):
        pass


def gateway_address(text):
    host, port = text.rsplit(":", 1)
    return (host, int(port))


def through(address, sni, ca, cert, key):
    sock, codec = single(gateway_address(address), sni, ca, cert, key)
    leader = codec.ok("Status.Leader", {})
    check(isinstance(leader, str) and leader.endswith(":8300"), f"Status.Leader {leader!r}")
    print(f"leader {leader}")
    sock.close()
    multi(gateway_address(address), sni, ca, cert, key)


def refused(address, sni, ca, cert, key):
    try:
        sock = open_tls(gateway_address(address), sni, context(ca, cert, key, ["consul/rpc-single"]))
    except (ssl.SSLError, ConnectionError, OSError):
        return
    no_answer(sock, ping_request(), f"SNI {sni}")


def main():
    mode = sys.argv[1]
    if mode == "direct":
        direct(*sys.argv[2:8])
    elif mode == "through":
        through(*sys.argv[2:7])
    elif mode == "refused":
        refused(*sys.argv[2:7])
    else:
        fail(f"unknown mode {mode}")
    print("ok")


if __name__ == "__main__":
    main()
