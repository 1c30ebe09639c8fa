#!/usr/bin/env python3
"""Creates N sessions on a praetor (or Consul) agent and reports its resident memory per
session: the figure issue #19 asks about sessions ("same care for the catalog and sessions").

Each session is what a lock client creates: `PUT /v1/session/create` with a name
(`rss-<i>`) and nothing else, so it lives on the agent's node with the default `serfHealth`
check, the default lock delay and the `release` behavior. 8 client threads on keep-alive
connections. RSS is read from /proc/<pid>/status (`VmRSS`) before the load and after the
server has been idle for `--settle` seconds, as bench/kv_load.py does:

    bench/session_rss.py --url http://127.0.0.1:8500 --pid PID --sessions 100000
"""

import argparse
import json
import sys
import time

from kv_load import proc_status_kib, run_clients


def create_sessions(url, count, deadline_s):
    """Creates `count` sessions; returns the seconds it took. Raises on any refusal."""

    def check(status, answer):
        if status != 200 or b'"ID"' not in answer:
            return f"session create answered {status}: {answer[:200]!r}"
        return None

    def request_of(i):
        return "PUT", "/v1/session/create", json.dumps({"Name": f"rss-{i}"}), check

    return run_clients(url, count, deadline_s, request_of, "session creation")


def measure(url, pid, sessions, settle_s=3.0, deadline_s=1800):
    """Creates the sessions and returns a report dict (sizes in bytes, times in seconds)."""
    rss_before_kib = proc_status_kib(pid, "VmRSS")
    load_s = create_sessions(url, sessions, deadline_s)
    time.sleep(settle_s)
    rss_after_kib = proc_status_kib(pid, "VmRSS")
    return {
        "sessions": sessions,
        "load_s": round(load_s, 2),
        "sessions_per_s": round(sessions / load_s) if load_s > 0 else None,
        "rss_before_bytes": rss_before_kib * 1024,
        "rss_after_bytes": rss_after_kib * 1024,
        "rss_per_session_bytes": round((rss_after_kib - rss_before_kib) * 1024 / sessions),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the agent's HTTP API")
    p.add_argument("--pid", type=int, required=True, help="the server process whose RSS is read")
    p.add_argument("--sessions", type=int, default=100_000)
    p.add_argument("--settle", type=float, default=3.0, help="idle seconds before reading RSS")
    p.add_argument("--deadline", type=float, default=1800, help="give up after this many seconds")
    args = p.parse_args()
    json.dump(measure(args.url, args.pid, args.sessions, args.settle, args.deadline), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
