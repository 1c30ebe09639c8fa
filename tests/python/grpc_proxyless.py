"""A proxyless gRPC server and client (grpcio from PyPI) for tests/it/connect/grpc_proxyless.rs.

serve <ip> <port>
    Serves the unary method /praetor.test.Echo/Say (raw bytes: answers b"db says " + the
    request) in plain text, as a mesh service behind its sidecar; prints "ready".
client <target>
    Runs with GRPC_XDS_BOOTSTRAP set by the caller; reads one message per line on stdin,
    calls the method on <target> (e.g. xds:///db) over a channel whose credentials come from
    xDS (the fallback is plain TLS without a client certificate, which the mesh refuses, so
    an answer proves the xDS mTLS was used) and prints "ok <answer>" or
    "err <status code> <details>" per line.
"""

import sys
import time
from concurrent import futures

import grpc

METHOD = "/praetor.test.Echo/Say"
# A call's deadline; the first one includes the xDS round trips.
CALL_TIMEOUT_S = 10


def serve(ip, port):
    def say(request, context):
        return b"db says " + request

    handler = grpc.method_handlers_generic_handler(
        "praetor.test.Echo",
        {
            "Say": grpc.unary_unary_rpc_method_handler(
                say,
                request_deserializer=lambda b: b,
                response_serializer=lambda b: b,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"{ip}:{port}")
    server.start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


def client(target):
    credentials = grpc.xds_channel_credentials(fallback_credentials=grpc.ssl_channel_credentials())
    channel = grpc.secure_channel(target, credentials)
    say = channel.unary_unary(
        METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    for line in sys.stdin:
        message = line.strip().encode()
        try:
            answer = say(message, timeout=CALL_TIMEOUT_S, wait_for_ready=True)
            print("ok " + answer.decode(), flush=True)
        except grpc.RpcError as e:
            details = (e.details() or "").replace("\n", " ")
            print(f"err {e.code().name} {details}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "client":
        client(sys.argv[2])
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}")
