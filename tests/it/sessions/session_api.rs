//! Sessions and locks over real sockets against a real `praetor agent -dev`: Consul's
//! defaults, errors and shapes; acquire/release semantics; invalidation by destroy, by a
//! bound check going critical and by node deregistration; lock-delay timing; blocking
//! queries waking lock waiters.

use crate::common;

use common::{request, Agent, HttpResponse};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A dev agent whose own node is in the catalog with a passing `serfHealth` check, which
/// the default session binds to (the agent registers itself shortly after it leads).
fn dev_agent() -> Agent {
    let agent = Agent::dev(&[]);
    wait_for_serf_health(&agent);
    agent
}

fn wait_for_serf_health(agent: &Agent) {
    let node = node_name(agent);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let checks = agent.get(&format!("/v1/health/node/{node}"));
        if checks.status == 200
            && checks.json().as_array().is_some_and(|list| {
                list.iter()
                    .any(|c| c["CheckID"] == "serfHealth" && c["Status"] == "passing")
            })
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the agent's node never got a passing serfHealth check");
}

fn create(agent: &Agent, body: Value) -> String {
    let r = agent.put("/v1/session/create", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "create: {}", r.text());
    r.json()["ID"].as_str().unwrap().to_string()
}

fn acquire(agent: &Agent, key: &str, session: &str, value: &str) -> HttpResponse {
    agent.put(&format!("/v1/kv/{key}?acquire={session}"), value.as_bytes())
}

fn entry(agent: &Agent, key: &str) -> Option<Value> {
    let r = agent.get(&format!("/v1/kv/{key}"));
    match r.status {
        404 => None,
        200 => Some(r.json()[0].clone()),
        other => panic!("GET {key}: {other} {}", r.text()),
    }
}

fn node_name(agent: &Agent) -> String {
    agent.get("/v1/agent/self").json()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn create_info_list_node_renew_destroy_with_consuls_shapes() {
    let agent = dev_agent();
    let node = node_name(&agent);
    let id = create(&agent, json!({"Name": "web-lock", "TTL": "15.0s"}));
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let info = agent.get(&format!("/v1/session/info/{id}"));
    assert_eq!(info.status, 200);
    let index = info.index();
    let s = &info.json()[0];
    assert_eq!(s["ID"], id);
    assert_eq!(s["Name"], "web-lock");
    assert_eq!(s["Node"], node.as_str());
    assert_eq!(s["LockDelay"], 15_000_000_000u64);
    assert_eq!(s["Behavior"], "release");
    assert_eq!(s["TTL"], "15.0s");
    assert_eq!(s["NodeChecks"], json!(["serfHealth"]));
    assert_eq!(s["ServiceChecks"], Value::Null);
    assert!(s.get("Checks").is_none(), "Checks is omitted when empty");
    assert_eq!(s["CreateIndex"], index);

    // Field order as Consul's encoder writes it.
    let text = info.text();
    let order: Vec<usize> = [
        "\"ID\"",
        "\"Name\"",
        "\"Node\"",
        "\"LockDelay\"",
        "\"Behavior\"",
        "\"TTL\"",
        "\"NodeChecks\"",
        "\"ServiceChecks\"",
        "\"CreateIndex\"",
        "\"ModifyIndex\"",
    ]
    .iter()
    .map(|f| text.find(f).unwrap())
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");

    let second = create(
        &agent,
        json!({"NodeChecks": [], "LockDelay": 5, "Behavior": "delete"}),
    );
    let s2 = &agent.get(&format!("/v1/session/info/{second}")).json()[0];
    assert_eq!(
        s2["LockDelay"], 5_000_000_000u64,
        "small numbers are seconds"
    );
    assert_eq!(s2["Behavior"], "delete");
    assert_eq!(s2["NodeChecks"], json!([]));

    let list = agent.get("/v1/session/list");
    assert_eq!(list.json().as_array().unwrap().len(), 2);
    assert_eq!(
        list.index(),
        agent.get(&format!("/v1/session/info/{second}")).index()
    );
    let by_node = agent.get(&format!("/v1/session/node/{node}"));
    assert_eq!(by_node.json().as_array().unwrap().len(), 2);
    assert_eq!(agent.get("/v1/session/node/nobody").json(), json!([]));

    let renewed = agent.put(&format!("/v1/session/renew/{id}"), b"");
    assert_eq!(renewed.status, 200);
    assert_eq!(renewed.json()[0]["ID"], id);

    let destroyed = agent.put(&format!("/v1/session/destroy/{id}"), b"");
    assert_eq!((destroyed.status, destroyed.text().trim()), (200, "true"));
    // Destroying again is fine; renewing a gone session is a 404 with Consul's text.
    assert_eq!(
        agent.put(&format!("/v1/session/destroy/{id}"), b"").status,
        200
    );
    let gone = agent.put(&format!("/v1/session/renew/{id}"), b"");
    assert_eq!(gone.status, 404);
    assert_eq!(gone.text(), format!("Session id '{id}' not found"));
    assert_eq!(
        agent.get(&format!("/v1/session/info/{id}")).json(),
        json!([])
    );
    assert_eq!(agent.get("/v1/session/renew/x").status, 405);
}

#[test]
fn create_refusals_use_consuls_words() {
    let agent = dev_agent();
    let cases = [
        (
            json!({"TTL": "5s"}),
            500,
            "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]",
        ),
        (
            json!({"TTL": "25h"}),
            500,
            "Invalid Session TTL '90000000000000', must be between [10s=24h0m0s]",
        ),
        (
            json!({"TTL": "soon"}),
            500,
            "Session TTL 'soon' invalid: time: invalid duration \"soon\"",
        ),
        (
            json!({"Behavior": "vanish"}),
            500,
            "Invalid Behavior setting 'vanish'",
        ),
        (json!({"Node": "ghost"}), 500, "Missing node registration"),
        (
            json!({"Checks": ["nope"]}),
            500,
            "Missing check 'nope' registration",
        ),
    ];
    for (body, status, text) in cases {
        let r = agent.put("/v1/session/create", body.to_string().as_bytes());
        assert_eq!((r.status, r.text()), (status, text.to_string()), "{body}");
    }
    let r = agent.put("/v1/session/create", b"{not json");
    assert_eq!(r.status, 400);
    assert!(
        r.text().starts_with("Request decode failed"),
        "{}",
        r.text()
    );
    // TTL "0s" means none; 10 s and 24 h are the inclusive bounds.
    for ttl in ["0s", "10s", "24h", "86400s"] {
        let r = agent.put(
            "/v1/session/create",
            json!({ "TTL": ttl }).to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{ttl}: {}", r.text());
    }
    // Lower-case field names, as py-consul sends them.
    let id = create(
        &agent,
        json!({"name": "py", "lockdelay": "1.5s", "ttl": "20s"}),
    );
    let s = &agent.get(&format!("/v1/session/info/{id}")).json()[0];
    assert_eq!(
        (s["Name"].clone(), s["LockDelay"].clone(), s["TTL"].clone()),
        (json!("py"), json!(1_500_000_000u64), json!("20s"))
    );
}

#[test]
fn acquire_and_release_follow_consuls_lock_index_rules() {
    let agent = dev_agent();
    let a = create(&agent, json!({}));
    let b = create(&agent, json!({}));
    assert_eq!(acquire(&agent, "lk", &a, "one").text().trim(), "true");
    let e = entry(&agent, "lk").unwrap();
    assert_eq!(
        (e["LockIndex"].clone(), e["Session"].clone()),
        (json!(1), json!(a))
    );
    // The holder re-acquires: value updates, LockIndex stays.
    assert_eq!(acquire(&agent, "lk", &a, "two").text().trim(), "true");
    let e = entry(&agent, "lk").unwrap();
    assert_eq!(
        (e["LockIndex"].clone(), e["Value"].clone()),
        (json!(1), json!("dHdv"))
    );
    // Someone else cannot, and cannot release it.
    assert_eq!(acquire(&agent, "lk", &b, "x").text().trim(), "false");
    assert_eq!(
        agent
            .put(&format!("/v1/kv/lk?release={b}"), b"")
            .text()
            .trim(),
        "false"
    );
    // The holder releases: Session cleared, LockIndex kept, value from the body.
    let released = agent.put(&format!("/v1/kv/lk?release={a}&flags=9"), b"done");
    assert_eq!(released.text().trim(), "true");
    let e = entry(&agent, "lk").unwrap();
    assert!(e.get("Session").is_none());
    assert_eq!(
        (e["LockIndex"].clone(), e["Flags"].clone()),
        (json!(1), json!(9))
    );
    // A new acquisition increments LockIndex; a released key carries no lock-delay.
    assert_eq!(acquire(&agent, "lk", &b, "mine").text().trim(), "true");
    assert_eq!(entry(&agent, "lk").unwrap()["LockIndex"], 2);
    // Errors from the store.
    let bad = acquire(&agent, "lk2", "00000000-0000-0000-0000-000000000000", "");
    assert_eq!(
        (bad.status, bad.text()),
        (
            500,
            "invalid session \"00000000-0000-0000-0000-000000000000\"".to_string()
        )
    );
    let conflict = agent.put(&format!("/v1/kv/lk?acquire={a}&cas=3"), b"");
    assert_eq!(conflict.status, 400);
}

#[test]
fn destroy_releases_wakes_waiters_and_enforces_the_lock_delay_no_longer() {
    let agent = dev_agent();
    let delay = Duration::from_secs(2);
    let holder = create(&agent, json!({"LockDelay": "2s"}));
    let waiter = create(&agent, json!({}));
    assert_eq!(acquire(&agent, "job", &holder, "h").text().trim(), "true");
    let index = agent.get("/v1/kv/job").index();

    // A lock waiter parks on the key and wakes when the holder's session ends.
    let addr = agent.addr();
    let parked = std::thread::spawn(move || {
        let started = Instant::now();
        let r = request(
            addr,
            "GET",
            &format!("/v1/kv/job?index={index}&wait=30s"),
            b"",
            &[],
        );
        (started.elapsed(), r)
    });
    std::thread::sleep(Duration::from_millis(300));
    let destroy_started = Instant::now();
    assert_eq!(
        agent
            .put(&format!("/v1/session/destroy/{holder}"), b"")
            .status,
        200
    );
    let destroyed_at = Instant::now();
    let (waited, woken) = parked.join().unwrap();
    assert!(
        waited < Duration::from_secs(10),
        "waiter woke on the release"
    );
    assert!(woken.json()[0].get("Session").is_none(), "{}", woken.text());
    assert!(woken.index() > index);

    // Inside the delay another live session is refused; right after it, it gets the lock.
    let mut first_success = None;
    while destroy_started.elapsed() < Duration::from_secs(10) {
        if acquire(&agent, "job", &waiter, "w").text().trim() == "true" {
            first_success = Some(Instant::now());
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let got = first_success.expect("acquired after the lock-delay");
    assert!(
        got.duration_since(destroy_started) >= delay - Duration::from_millis(20),
        "acquired {:?} after the destroy began, inside the {delay:?} lock-delay",
        got.duration_since(destroy_started)
    );
    assert!(
        got.duration_since(destroyed_at) <= delay + Duration::from_millis(700),
        "lock-delay lasted {:?}, longer than {delay:?}",
        got.duration_since(destroyed_at)
    );
    // A key released explicitly gets no delay.
    assert_eq!(
        agent
            .put(&format!("/v1/kv/job?release={waiter}"), b"")
            .text()
            .trim(),
        "true"
    );
    assert_eq!(
        acquire(&agent, "job", &waiter, "again").text().trim(),
        "true"
    );
}

#[test]
fn delete_behavior_deletes_held_keys() {
    let agent = dev_agent();
    let s = create(&agent, json!({"Behavior": "delete", "LockDelay": "0s"}));
    for key in ["eph/a", "eph/b"] {
        assert_eq!(acquire(&agent, key, &s, "v").text().trim(), "true");
    }
    agent.put("/v1/kv/eph/unheld", b"stays");
    agent.put(&format!("/v1/session/destroy/{s}"), b"");
    assert!(entry(&agent, "eph/a").is_none() && entry(&agent, "eph/b").is_none());
    assert!(entry(&agent, "eph/unheld").is_some());
}

fn register(agent: &Agent, node: &str, check_status: &str) {
    let body = json!({
        "Node": node, "Address": "10.9.9.9",
        "Checks": [
            {"CheckID": "serfHealth", "Name": "serf", "Status": "passing"},
            {"CheckID": "app", "Name": "app", "Status": check_status}
        ]
    });
    let r = agent.put("/v1/catalog/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_bound_check_going_critical_or_the_node_leaving_invalidates_sessions() {
    let agent = dev_agent();
    register(&agent, "worker", "passing");
    let bound = create(
        &agent,
        json!({"Node": "worker", "NodeChecks": ["app"], "LockDelay": "0s"}),
    );
    let serf_only = create(&agent, json!({"Node": "worker", "LockDelay": "0s"}));
    assert_eq!(
        acquire(&agent, "leader/app", &bound, "x").text().trim(),
        "true"
    );
    assert_eq!(
        acquire(&agent, "leader/serf", &serf_only, "x")
            .text()
            .trim(),
        "true"
    );
    let index = agent.get("/v1/kv/leader/app").index();
    let addr = agent.addr();
    let parked = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/kv/leader/app?index={index}&wait=30s"),
            b"",
            &[],
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    // A warning keeps the session; critical ends it and releases its lock.
    register(&agent, "worker", "warning");
    assert_eq!(
        agent
            .get(&format!("/v1/session/info/{bound}"))
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    register(&agent, "worker", "critical");
    assert_eq!(
        agent.get(&format!("/v1/session/info/{bound}")).json(),
        json!([])
    );
    assert!(parked.join().unwrap().json()[0].get("Session").is_none());
    assert!(entry(&agent, "leader/app")
        .unwrap()
        .get("Session")
        .is_none());
    assert_eq!(
        entry(&agent, "leader/serf").unwrap()["Session"],
        json!(serf_only)
    );
    // A session cannot bind to a critical check.
    let r = agent.put(
        "/v1/session/create",
        json!({"Node": "worker", "NodeChecks": ["app"]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        (r.status, r.text()),
        (500, "Check 'app' is in critical state".to_string())
    );
    // Deregistering the node ends every session on it.
    let r = agent.put("/v1/catalog/deregister", br#"{"Node": "worker"}"#);
    assert_eq!(r.status, 200);
    assert_eq!(agent.get("/v1/session/node/worker").json(), json!([]));
    assert!(entry(&agent, "leader/serf")
        .unwrap()
        .get("Session")
        .is_none());
}

#[test]
fn session_reads_block_on_precise_keys() {
    let agent = dev_agent();
    let node = node_name(&agent);
    let first = create(&agent, json!({}));
    let list_index = agent.get("/v1/session/list").index();
    let info_index = agent.get(&format!("/v1/session/info/{first}")).index();
    let addr = agent.addr();
    let node_for_thread = node.clone();
    let list = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/session/list?index={list_index}&wait=20s"),
            b"",
            &[],
        )
    });
    let by_node = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/session/node/{node_for_thread}?index={list_index}&wait=20s"),
            b"",
            &[],
        )
    });
    let first_for_thread = first.clone();
    let info = std::thread::spawn(move || {
        let first = first_for_thread;
        let started = Instant::now();
        let r = request(
            addr,
            "GET",
            &format!("/v1/session/info/{first}?index={info_index}&wait=2s"),
            b"",
            &[],
        );
        (started.elapsed(), r)
    });
    std::thread::sleep(Duration::from_millis(300));
    let second = create(&agent, json!({}));
    let list = list.join().unwrap();
    assert_eq!(list.json().as_array().unwrap().len(), 2);
    assert!(list.index() > list_index);
    assert_eq!(by_node.join().unwrap().json().as_array().unwrap().len(), 2);
    // Another session's creation does not wake a watcher of `first`.
    let (waited, r) = info.join().unwrap();
    assert!(
        waited >= Duration::from_millis(1900),
        "woke after {waited:?}"
    );
    assert_eq!(r.json()[0]["ID"], json!(first));
    assert_ne!(second, first);
}

#[test]
fn ttl_expiry_releases_or_deletes_and_renewals_keep_sessions() {
    let agent = dev_agent();
    let start = Instant::now();
    let release = create(&agent, json!({"TTL": "10s", "LockDelay": "0s"}));
    let release_created = start.elapsed();
    let delete = create(
        &agent,
        json!({"TTL": "10s", "Behavior": "delete", "LockDelay": "0s"}),
    );
    let delete_created = start.elapsed();
    let renewed = create(&agent, json!({"TTL": "10s", "LockDelay": "0s"}));
    assert_eq!(
        acquire(&agent, "ttl/release", &release, "v").text().trim(),
        "true"
    );
    assert_eq!(
        acquire(&agent, "ttl/delete", &delete, "v").text().trim(),
        "true"
    );
    assert_eq!(
        acquire(&agent, "ttl/renewed", &renewed, "v").text().trim(),
        "true"
    );
    let mut last_renew = Instant::now();
    // Each session expires on its own timer: the two were created one after the other, so
    // they need not expire in the same leader tick. Each expiry is timed separately.
    let mut released_at = None;
    let mut deleted_at = None;
    // Both expire within 2 × TTL of their creation (plus the leader's tick).
    let deadline = delete_created + Duration::from_secs(24);
    while start.elapsed() < deadline {
        if last_renew.elapsed() >= Duration::from_secs(5) {
            assert_eq!(
                agent
                    .put(&format!("/v1/session/renew/{renewed}"), b"")
                    .status,
                200
            );
            last_renew = Instant::now();
        }
        let held = entry(&agent, "ttl/release").is_some_and(|e| e.get("Session").is_some());
        if !held && released_at.is_none() {
            released_at = Some(start.elapsed());
        }
        if deleted_at.is_none() && entry(&agent, "ttl/delete").is_none() {
            deleted_at = Some(start.elapsed());
        }
        if released_at.is_some()
            && deleted_at.is_some()
            && start.elapsed() > deadline - Duration::from_secs(2)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The TTL is a lower bound; the leader waits 2 × TTL.
    for (what, at, created) in [
        ("release", released_at, release_created),
        ("delete", deleted_at, delete_created),
    ] {
        let at = at.unwrap_or_else(|| panic!("the {what} session expired"));
        assert!(at >= Duration::from_secs(10), "{what} expired after {at:?}");
        assert!(
            at <= created + Duration::from_secs(22),
            "{what} (created at {created:?}) expired after {at:?}"
        );
    }
    assert_eq!(
        agent.get(&format!("/v1/session/info/{release}")).json(),
        json!([])
    );
    assert_eq!(
        entry(&agent, "ttl/renewed").unwrap()["Session"],
        json!(renewed)
    );
}
