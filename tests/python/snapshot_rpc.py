#!/usr/bin/env python3
"""An independent client of Consul's snapshot stream on the server port (byte 5,
`RPCSnapshot`), written from Consul's `agent/pool/pool.go` (`SnapshotRPC`) and
`agent/structs` (`SnapshotRequest{Datacenter, Token, AllowStale, Op}`, `SnapshotOp` save 0
and restore 1, `SnapshotResponse{Error, QueryMeta}`), with no praetor code.

The wire: byte 5 (inside TLS: byte 3, the handshake, then byte 5), the msgpack request,
for a restore the archive, then the write half closed (on the TCP socket, as Go's
`CloseWrite` does, under TLS too); the server answers the msgpack response and, for a
save, streams the archive until it closes. Keys are written and read with `KVS.Apply` and
`KVS.Get` on byte 0 (Go's net/rpc with msgpack).

Usage:
  snapshot_rpc.py plain <ip>                   save, restore, bad input
  snapshot_rpc.py tls <ip> <ca> <cert> <key>   save and restore inside TLS
  snapshot_rpc.py acl <ip> <management token>  tokens checked as Consul's SnapshotAllowed

Exits non-zero with a message on the first thing that is not as Consul answers it.
"""

import socket
import ssl
import sys

import msgpack

from consul_rpc import PORT, check, dial, fail, pack, unpacker

RPC_CONSUL = 0
RPC_TLS = 3
RPC_SNAPSHOT = 5
SAVE, RESTORE = 0, 1


def call(ip, method, body):
    """One net/rpc call on its own byte-0 connection: (error, reply)."""
    sock = dial(ip, RPC_CONSUL)
    sock.sendall(pack({"ServiceMethod": method, "Seq": 1}) + pack(body))
    values, answer = unpacker(), []
    while len(answer) < 2:
        chunk = sock.recv(65536)
        check(chunk, f"{method}: the connection closed")
        values.feed(chunk)
        answer.extend(values)
    sock.close()
    return answer[0]["Error"], answer[1]


def kv_set(ip, key, value, token=""):
    error, _ = call(ip, "KVS.Apply", {"Op": "set", "DirEnt": {"Key": key, "Value": value},
                                      "Token": token})
    check(error == "", f"KVS.Apply {key}: {error}")


def kv_value(ip, key, token=""):
    error, reply = call(ip, "KVS.Get", {"Key": key, "Token": token})
    check(error == "", f"KVS.Get {key}: {error}")
    entries = reply["Entries"] or []
    if not entries:
        return None
    value = entries[0]["Value"]
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


class Snapshot:
    """One snapshot connection: `open` makes a socket that has sent byte 5 (plain or TLS)."""

    def __init__(self, open_connection):
        self.open = open_connection

    def request(self, op, token="", allow_stale=False, archive=None, raw_request=None):
        """Sends the request (and archive), closes the write half; returns (response, the
        bytes after it). The response is None when the server closed without one."""
        sock = self.open()
        body = raw_request if raw_request is not None else pack(
            {"Datacenter": "", "Token": token, "AllowStale": allow_stale, "Op": op})
        try:
            sock.sendall(body)
            if archive:
                sock.sendall(archive)
            # Go's CloseWrite on the TCP connection: no TLS close_notify.
            socket.socket.shutdown(sock, socket.SHUT_WR)
        except OSError:
            pass  # the server closed early (a refused connection): read what it said
        data = bytearray()
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except (ConnectionResetError, ssl.SSLError):
                chunk = b""
            if not chunk:
                break
            data += chunk
        values = unpacker()
        values.feed(bytes(data))
        try:
            response = values.unpack()
        except (msgpack.OutOfData, ValueError):
            sock.close()
            return None, bytes(data)
        received = bytes(data[values.tell():])
        sock.close()
        return response, received

    def save(self, token=""):
        response, archive = self.request(SAVE, token=token)
        check(response is not None, "a save got no response")
        check(response["Error"] == "", f"save refused: {response['Error']}")
        check(response["Index"] > 0, f"a save's Index: {response}")
        check(response["KnownLeader"] is True, f"a save's KnownLeader: {response}")
        check(archive[:2] == b"\x1f\x8b", f"the archive is not gzip: {archive[:16]!r}")
        return archive

    def restore(self, archive, token=""):
        response, rest = self.request(RESTORE, token=token, archive=archive)
        check(response is not None, "a restore got no response")
        check(response["Error"] == "", f"restore refused: {response['Error']}")
        check(rest == b"", f"a restore answered bytes after its response: {rest[:32]!r}")

    def refused(self, op, expected, **kwargs):
        response, rest = self.request(op, **kwargs)
        check(response is not None, f"no response (wanted {expected!r})")
        error = response["Error"]
        check(error.startswith(expected), f"answered {error!r}, wanted {expected!r}")
        check(rest == b"", "a refusal carried an archive")
        return error


def round_trip(ip, snapshot, key, token=""):
    """Save with the key at "before", change it, restore: the key is back."""
    kv_set(ip, key, b"before", token)
    archive = snapshot.save(token)
    kv_set(ip, key, b"after", token)
    check(kv_value(ip, key, token) == b"after", "the write after the save")
    snapshot.restore(archive, token)
    check(kv_value(ip, key, token) == b"before", "the restore did not bring the key back")
    return archive


def plain(ip):
    snapshot = Snapshot(lambda: dial(ip, RPC_SNAPSHOT))
    archive = round_trip(ip, snapshot, "snap/plain")
    # An Op that is neither save nor restore: Consul's words, Go's %q of the number.
    snapshot.refused(7, "unrecognized snapshot op '\\a'")
    # A restore may not be stale.
    snapshot.refused(RESTORE, "stale not allowed for restore", allow_stale=True,
                     archive=archive)
    # A truncated archive is refused; the state stays as it was.
    kv_set(ip, "snap/plain", b"kept")
    error = snapshot.refused(RESTORE, "", archive=archive[: len(archive) // 2])
    check(error != "", "a truncated archive was restored")
    check(kv_value(ip, "snap/plain") == b"kept", "a refused restore changed the state")
    # Garbage after byte 5: the connection closes without a response.
    response, rest = snapshot.request(SAVE, raw_request=b"\xc1garbage")
    check(response is None and rest == b"", f"garbage was answered: {response!r}")
    # A request that is not a map closes it too.
    response, _ = snapshot.request(SAVE, raw_request=pack([1, 2, 3]))
    check(response is None, f"an array request was answered: {response!r}")
    # The server still serves.
    snapshot.save()
    print("ok plain")


def tls(ip, ca, cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    context.load_cert_chain(cert, key)

    def open_tls():
        raw = dial(ip, RPC_TLS)
        sock = context.wrap_socket(raw, server_hostname="server.dc1.consul")
        sock.sendall(bytes([RPC_SNAPSHOT]))
        return sock

    # verify_incoming: a plaintext byte 5 is refused, unanswered.
    plaintext = Snapshot(lambda: dial(ip, RPC_SNAPSHOT))
    response, _ = plaintext.request(SAVE)
    check(response is None, "a plaintext snapshot passed verify_incoming")
    round_trip_tls(ip, context)
    snapshot = Snapshot(open_tls)
    snapshot.refused(3, "unrecognized snapshot op '\\x03'")
    print("ok tls")


def round_trip_tls(ip, context):
    """Keys through byte 0 inside TLS, the snapshot through byte 5 inside TLS."""
    def open_tls():
        raw = dial(ip, RPC_TLS)
        sock = context.wrap_socket(raw, server_hostname="server.dc1.consul")
        sock.sendall(bytes([RPC_SNAPSHOT]))
        return sock

    def tls_call(method, body):
        raw = dial(ip, RPC_TLS)
        sock = context.wrap_socket(raw, server_hostname="server.dc1.consul")
        sock.sendall(bytes([RPC_CONSUL]))
        sock.sendall(pack({"ServiceMethod": method, "Seq": 1}) + pack(body))
        values, answer = unpacker(), []
        while len(answer) < 2:
            chunk = sock.recv(65536)
            check(chunk, f"{method}: the connection closed")
            values.feed(chunk)
            answer.extend(values)
        sock.close()
        check(answer[0]["Error"] == "", f"{method}: {answer[0]['Error']}")
        return answer[1]

    def value():
        entries = tls_call("KVS.Get", {"Key": "snap/tls"})["Entries"] or []
        got = entries[0]["Value"]
        return got.encode("utf-8", "surrogateescape") if isinstance(got, str) else got

    snapshot = Snapshot(open_tls)
    tls_call("KVS.Apply", {"Op": "set", "DirEnt": {"Key": "snap/tls", "Value": b"before"}})
    archive = snapshot.save()
    tls_call("KVS.Apply", {"Op": "set", "DirEnt": {"Key": "snap/tls", "Value": b"after"}})
    check(value() == b"after", "the write after the save")
    snapshot.restore(archive)
    check(value() == b"before", "the restore inside TLS did not bring the key back")


def acl(ip, management):
    snapshot = Snapshot(lambda: dial(ip, RPC_SNAPSHOT))
    # The anonymous token may not, nor may an unknown secret: Consul's words.
    snapshot.refused(SAVE, "Permission denied")
    snapshot.refused(SAVE, "ACL not found", token="00000000-0000-4000-8000-00000000beef")
    # A refused restore leaves the state alone, and the caller reads the refusal.
    kv_set(ip, "snap/acl", b"before", management)
    archive = snapshot.save(management)
    kv_set(ip, "snap/acl", b"after", management)
    snapshot.refused(RESTORE, "Permission denied", archive=archive)
    check(kv_value(ip, "snap/acl", management) == b"after", "a refused restore ran")
    snapshot.restore(archive, management)
    check(kv_value(ip, "snap/acl", management) == b"before", "the restore")
    print("ok acl")


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    {"plain": plain, "tls": tls, "acl": acl}[mode](*args)


if __name__ == "__main__":
    main()
