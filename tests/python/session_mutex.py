"""One contender for a lock, through py-consul, against a praetor cluster whose servers die.

Usage: session_mutex.py WORKER SECONDS LOCK_DELAY_SECONDS HOST:PORT[,HOST:PORT...]

For SECONDS the worker keeps a TTL session alive (renewed at TTL/2), tries to acquire the key
`mutex/lock`, holds it briefly, then gives it up either by releasing it (no lock-delay) or by
destroying its session (the lock-delay applies) and creating a fresh one, alternately. Every request that
fails goes to the next server. It prints one JSON event per line with `time.monotonic()`,
the clock every process on the machine shares; the Rust test checks the events of all
workers together. A holder that finds at release time that the lock was taken from it
reports `release_refused`.
"""
import json
import random
import sys
import time

import consul
import requests

KEY = "mutex/lock"
TTL_SECONDS = 10
# A server that lost its leader holds a request for a few seconds before answering 500.
REQUEST_TIMEOUT_SECONDS = 8


class Servers:
    """py-consul clients for every server; requests move on to the next one on failure."""

    def __init__(self, addresses, worker):
        self.clients = []
        for address in addresses:
            host, port = address.rsplit(":", 1)
            client = consul.Consul(host=host, port=int(port))
            client.http.connections_timeout = REQUEST_TIMEOUT_SECONDS
            self.clients.append(client)
        self.current = worker % len(self.clients)
        self.failures = 0

    def call(self, operation, give_up_at):
        """operation(client) on the current server, moving on after transport or 5xx errors.

        NotFound is an answer, not a failure, and propagates. Returns (result, ambiguous):
        ambiguous is True when an earlier attempt failed in a way that may have applied.
        """
        ambiguous = False
        while True:
            client = self.clients[self.current]
            try:
                return operation(client), ambiguous
            except consul.NotFound:
                raise
            except (requests.exceptions.RequestException, consul.ConsulException):
                ambiguous = True
                self.failures += 1
                self.current = (self.current + 1) % len(self.clients)
                if time.monotonic() > give_up_at:
                    raise
                time.sleep(0.1)


def emit(event, session="", **extra):
    print(json.dumps(dict(event=event, t=time.monotonic(), session=session, **extra)), flush=True)


def main():
    worker = int(sys.argv[1])
    seconds = float(sys.argv[2])
    lock_delay = int(float(sys.argv[3]))
    servers = Servers(sys.argv[4].split(","), worker)
    rng = random.Random(worker * 7919 + int(time.time()))
    end = time.monotonic() + seconds
    # Cleanup at the end may take a leader election or two.
    cleanup_deadline = end + 40

    def create_session():
        # A TTL-only session: no serfHealth binding, so killing the server it was created
        # through does not invalidate it; only a destroy or missed renewals do.
        sid, _ = servers.call(
            lambda c: c.session.create(
                name="mutex-%d" % worker, ttl=TTL_SECONDS, lock_delay=lock_delay, checks=[]
            ),
            cleanup_deadline,
        )
        emit("session_created", sid)
        return sid, time.monotonic()

    session, renewed_at = create_session()
    holding = False
    holdings = 0
    while time.monotonic() < end:
        if time.monotonic() - renewed_at >= TTL_SECONDS / 2:
            try:
                servers.call(lambda c: c.session.renew(session), cleanup_deadline)
                renewed_at = time.monotonic()
                emit("renewed", session)
            except consul.NotFound:
                emit("lost", session)
                session, renewed_at = create_session()
            continue

        sent = time.monotonic()
        acquired, _ = servers.call(
            lambda c: c.kv.put(KEY, "worker-%d" % worker, acquire=session), cleanup_deadline
        )
        if not acquired:
            # Wait for the key to change (a release), briefly, then try again.
            try:
                (index, _), _ = servers.call(lambda c: c.kv.get(KEY), cleanup_deadline)
                servers.call(lambda c: c.kv.get(KEY, index=index, wait="1s"), cleanup_deadline)
            except consul.NotFound:
                pass
            time.sleep(0.02 + rng.random() * 0.05)
            continue
        # `t` is when the answer came, `sent` when the request went out.
        emit("acquired", session, sent=sent)
        holding = True
        time.sleep(0.2 + rng.random() * 0.8)

        # Alternate the two ways of giving the lock up, offset by worker, so every run
        # has destroys followed by acquisitions whatever the interleaving.
        holdings += 1
        if (holdings + worker) % 2 == 1:
            emit("release_begin", session)
            released, ambiguous = servers.call(
                lambda c: c.kv.put(KEY, "free", release=session), cleanup_deadline
            )
            if released:
                emit("released", session)
            elif ambiguous:
                # An earlier attempt may have released it already; not proof of a loss.
                emit("release_ambiguous", session)
            else:
                emit("release_refused", session)
            holding = False
        else:
            emit("destroy_begin", session)
            servers.call(lambda c: c.session.destroy(session), cleanup_deadline)
            emit("destroyed", session)
            holding = False
            session, renewed_at = create_session()
        # Step back a moment so that the waiters, not the last holder, race for the lock.
        time.sleep(0.3)

    assert not holding
    # An acquire whose answer was lost may have succeeded: destroying the session frees it.
    servers.call(lambda c: c.session.destroy(session), cleanup_deadline)
    emit("done", session, failovers=servers.failures)


if __name__ == "__main__":
    main()
