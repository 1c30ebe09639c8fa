"""Sessions, locks and transactions through py-consul, against a praetor agent.

Usage: session_lock.py HOST PORT. Exits non-zero with a message on the first mismatch.
"""
import base64
import sys
import time

import consul


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)
    node = c.agent.self()["Config"]["NodeName"]

    # The lock pattern py-consul users write: a TTL session, acquire, renew, release.
    sid = c.session.create(name="py-lock", ttl=10, lock_delay=1)
    other = c.session.create(name="py-other", behavior="delete", lock_delay=0)
    check(len(sid) == 36, "session id is a UUID: %r" % sid)
    _, info = c.session.info(sid)
    check(info["Name"] == "py-lock" and info["TTL"] == "10s", "info: %r" % info)
    check(info["LockDelay"] == 1_000_000_000, "lock delay in ns: %r" % info)
    check(info["Node"] == node, "default node is the agent's: %r" % info)

    check(c.kv.put("py/leader", "me", acquire=sid) is True, "acquire")
    check(c.kv.put("py/leader", "you", acquire=other) is False, "second acquire refused")
    _, entry = c.kv.get("py/leader")
    check(entry["Session"] == sid and entry["LockIndex"] == 1, "holder: %r" % entry)
    check(entry["Value"] == b"me", "value: %r" % entry)

    renewed = c.session.renew(sid)
    check(renewed["ID"] == sid, "renew returns the session: %r" % renewed)

    _, sessions = c.session.list()
    check({s["ID"] for s in sessions} == {sid, other}, "list: %r" % sessions)
    _, on_node = c.session.node(node)
    check(len(on_node) == 2, "node sessions: %r" % on_node)

    # A blocking read wakes when the holder releases.
    index, _ = c.kv.get("py/leader")
    check(c.kv.put("py/leader", "bye", release=sid) is True, "release")
    index2, entry = c.kv.get("py/leader", index=index, wait="5s")
    check(int(index2) > int(index) and entry.get("Session") is None, "released: %r" % entry)
    check(c.kv.put("py/leader", "you", acquire=other) is True, "the other session acquires")
    check(c.kv.get("py/leader")[1]["LockIndex"] == 2, "LockIndex moves on a new acquisition")

    # A delete-behavior session takes its keys with it; destroy is idempotent.
    check(c.session.destroy(other) is True, "destroy")
    check(c.session.destroy(other) is True, "destroy again")
    check(c.kv.get("py/leader")[1] is None, "the delete session's key is gone")
    try:
        c.session.renew(other)
        check(False, "renewing a destroyed session must fail")
    except consul.NotFound:
        pass

    # Transactions with py-consul's txn API.
    b64 = lambda s: base64.b64encode(s.encode()).decode()
    result = c.txn.put([
        {"KV": {"Verb": "set", "Key": "py/t1", "Value": b64("a")}},
        {"KV": {"Verb": "lock", "Key": "py/t2", "Value": b64("b"), "Session": sid}},
        {"KV": {"Verb": "get", "Key": "py/t1"}},
    ])
    check(result["Errors"] is None and len(result["Results"]) == 3, "txn: %r" % result)
    check(result["Results"][1]["KV"]["Session"] == sid, "txn lock: %r" % result)
    check(result["Results"][2]["KV"]["Value"] == b64("a"), "txn get: %r" % result)

    # Destroying the lock session releases its keys and starts the lock-delay.
    c.session.destroy(sid)
    fresh = c.session.create(name="py-fresh", lock_delay=0)
    started = time.time()
    while c.kv.put("py/t2", "mine", acquire=fresh) is not True:
        check(time.time() - started < 5, "acquired after the 1 s lock-delay")
        time.sleep(0.05)
    waited = time.time() - started
    check(0.7 <= waited <= 2.5, "lock-delay of 1 s honoured: waited %.2fs" % waited)
    c.session.destroy(fresh)
    print("ok")


if __name__ == "__main__":
    main()
