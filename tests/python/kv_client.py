"""KV through py-consul, the Python client Consul users run, against a praetor agent.

Usage: kv_client.py HOST PORT. Exits non-zero with a message on the first mismatch.
"""
import base64
import sys
import threading
import time

import consul


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)

    check(c.kv.put("py/greeting", "hello") is True, "put returns True")
    index, entry = c.kv.get("py/greeting")
    check(entry["Value"] == b"hello", "value round-trips: %r" % (entry,))
    check(entry["ModifyIndex"] == int(index), "index is the key's ModifyIndex")

    check(c.kv.put("py/flagged", "x", flags=7) is True, "put with flags")
    check(c.kv.get("py/flagged")[1]["Flags"] == 7, "flags stored")

    # Check-and-set.
    check(c.kv.put("py/cas", "1", cas=0) is True, "cas=0 creates")
    check(c.kv.put("py/cas", "2", cas=0) is False, "cas=0 refuses an existing key")
    _, current = c.kv.get("py/cas")
    check(c.kv.put("py/cas", "3", cas=current["ModifyIndex"]) is True, "cas with the current index")

    # Recursive listing and keys.
    _, entries = c.kv.get("py/", recurse=True)
    check([e["Key"] for e in entries] == ["py/cas", "py/flagged", "py/greeting"], "recurse: %r" % entries)
    _, keys = c.kv.get("py/", keys=True)
    check(keys == ["py/cas", "py/flagged", "py/greeting"], "keys: %r" % keys)

    # Missing key.
    index, missing = c.kv.get("py/absent")
    check(missing is None and index is not None and int(index) > 0, "missing key: %r %r" % (index, missing))

    # Blocking query: a watcher parked on the key's index wakes when the key changes.
    index, _ = c.kv.get("py/greeting")
    result = {}

    def watch():
        result["value"] = c.kv.get("py/greeting", index=index, wait="10s")

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.3)
    started = time.time()
    c.kv.put("py/greeting", "changed")
    thread.join(15)
    check(not thread.is_alive(), "the blocking query returned")
    new_index, entry = result["value"]
    check(entry["Value"] == b"changed" and int(new_index) > int(index), "the watcher saw the change")
    check(time.time() - started < 2, "the watcher woke promptly")

    # Deletes.
    check(c.kv.delete("py/flagged") is True, "delete")
    check(c.kv.get("py/flagged")[1] is None, "deleted key is gone")
    check(c.kv.delete("py/", recurse=True) is True, "recursive delete")
    check(c.kv.get("py/", recurse=True)[1] is None, "prefix is empty")

    # Session verbs inside a transaction: lock, check-session, unlock.
    session = c.session.create(name="py-txn", behavior="release", checks=[])
    lock = {"KV": {"Verb": "lock", "Key": "py/txn-lock", "Value": base64.b64encode(b"held").decode(),
                   "Session": session}}
    result = c.txn.put([lock])
    check(result["Errors"] is None and result["Results"][0]["KV"]["Session"] == session,
          "txn lock: %r" % result)
    result = c.txn.put([{"KV": {"Verb": "check-session", "Key": "py/txn-lock", "Session": session}}])
    check(result["Errors"] is None, "txn check-session: %r" % result)
    other = c.session.create(name="py-other", behavior="release", checks=[])
    try:
        c.txn.put([{"KV": {"Verb": "check-session", "Key": "py/txn-lock", "Session": other}}])
        check(False, "check-session with another session must fail")
    except consul.ConsulException as e:
        check("409" in str(e) or "session" in str(e), "a failed check-session rolls back: %s" % e)
    result = c.txn.put([{"KV": {"Verb": "unlock", "Key": "py/txn-lock", "Session": session}}])
    check(result["Errors"] is None, "txn unlock: %r" % result)
    check(c.kv.get("py/txn-lock")[1].get("Session") is None, "unlock released the key")
    c.session.destroy(session)
    c.session.destroy(other)

    # Status endpoints.
    check(c.status.leader() != "", "leader known")
    check(len(c.status.peers()) == 1, "one peer in dev mode")
    print("ok")


if __name__ == "__main__":
    main()
