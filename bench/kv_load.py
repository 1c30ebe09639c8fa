#!/usr/bin/env python3
"""Loads N KV keys into praetor (`PUT /v1/txn`) or etcd (`POST /v3/kv/txn`, its JSON gateway)
and reports the server's resident memory before and after, and the load time.

Both sides get the same load: keys named `load/<12 digits>` (17 bytes), values of a fixed
size, 64 sets per transaction, sent by 8 client threads on keep-alive connections. This is
the load issue #19's memory targets are stated for (1M × 100 B: RSS ≤ 2.0× the raw bytes
and ≤ 0.3× a one-member etcd's; 1M × 4 KiB: ≤ 1.3× raw).

RSS is read from /proc/<pid>/status (`VmRSS`) after the load, once the server has been idle
for `--settle` seconds; during the load the peak is sampled too (`VmHWM`). Used by
bench/compare.py (rows `kv-rss-*`) and by hand:

    bench/kv_load.py --system praetor --url http://127.0.0.1:18510 --pid PID --keys 1000000
"""

import argparse
import base64
import http.client
import json
import sys
import threading
import time
import urllib.parse

KEYS_PER_TXN = 64
CLIENTS = 8
KEY_FORMAT = "load/{:012d}"
# A transaction that takes longer than this is a hung server, not a slow one.
REQUEST_TIMEOUT_S = 60


def proc_status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def praetor_body(keys, value_b64):
    return json.dumps([{"KV": {"Verb": "set", "Key": k, "Value": value_b64}} for k in keys])


def etcd_body(keys, value_b64):
    ops = [{"requestPut": {"key": base64.b64encode(k.encode()).decode(), "value": value_b64}} for k in keys]
    return json.dumps({"success": ops})


def run_clients(url, jobs, deadline_s, request_of, what):
    """Sends `jobs` numbered requests from CLIENTS threads on keep-alive connections and
    returns the seconds it took. `request_of(i)` gives job i's (method, path, body, check),
    where `check(status, answer)` returns an error text or None. Raises on the first error,
    or when the jobs are not done within `deadline_s`."""
    parsed = urllib.parse.urlparse(url)
    next_job = [0]
    lock = threading.Lock()
    errors = []
    deadline = time.monotonic() + deadline_s

    def client():
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=REQUEST_TIMEOUT_S)
        try:
            while not errors:
                with lock:
                    job = next_job[0]
                    next_job[0] += 1
                if job >= jobs:
                    return
                if time.monotonic() > deadline:
                    errors.append(f"{what} did not finish within {deadline_s}s")
                    return
                method, path, body, check = request_of(job)
                conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                error = check(response.status, response.read())
                if error:
                    errors.append(error)
        except Exception as e:  # noqa: BLE001 - reported to the caller
            errors.append(f"{what} client failed: {e}")
        finally:
            conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return time.monotonic() - started


def load(system, url, keys, value_bytes, deadline_s):
    """Writes `keys` keys; returns the seconds it took. Raises on any refused transaction."""
    method, path, body_of = {
        "praetor": ("PUT", "/v1/txn", praetor_body),
        "etcd": ("POST", "/v3/kv/txn", etcd_body),
    }[system]
    value_b64 = base64.b64encode(b"v" * value_bytes).decode()
    batches = (keys + KEYS_PER_TXN - 1) // KEYS_PER_TXN

    def check(status, answer):
        return None if status == 200 else f"{system} answered {status}: {answer[:200]!r}"

    def request_of(batch):
        first = batch * KEYS_PER_TXN
        names = [KEY_FORMAT.format(i) for i in range(first, min(first + KEYS_PER_TXN, keys))]
        return method, path, body_of(names, value_b64), check

    return run_clients(url, batches, deadline_s, request_of, f"{system} load")


def measure(system, url, pid, keys, value_bytes, settle_s=3.0, deadline_s=1800):
    """Loads the keys and returns a report dict (sizes in bytes, times in seconds)."""
    rss_before_kib = proc_status_kib(pid, "VmRSS")
    load_s = load(system, url, keys, value_bytes, deadline_s)
    time.sleep(settle_s)
    rss_after_kib = proc_status_kib(pid, "VmRSS")
    raw_bytes = keys * (len(KEY_FORMAT.format(0)) + value_bytes)
    return {
        "system": system,
        "keys": keys,
        "value_bytes": value_bytes,
        "raw_bytes": raw_bytes,
        "load_s": round(load_s, 2),
        "keys_per_s": round(keys / load_s) if load_s > 0 else None,
        "rss_before_bytes": rss_before_kib * 1024,
        "rss_after_bytes": rss_after_kib * 1024,
        "rss_peak_bytes": proc_status_kib(pid, "VmHWM") * 1024,
        "rss_per_raw": round(rss_after_kib * 1024 / raw_bytes, 3),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", choices=["praetor", "etcd"], required=True)
    p.add_argument("--url", required=True, help="praetor's HTTP API or etcd's client URL")
    p.add_argument("--pid", type=int, required=True, help="the server process whose RSS is read")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--settle", type=float, default=3.0, help="idle seconds before reading RSS")
    p.add_argument("--deadline", type=float, default=1800, help="give up after this many seconds")
    args = p.parse_args()
    report = measure(args.system, args.url, args.pid, args.keys, args.value_bytes, args.settle, args.deadline)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
