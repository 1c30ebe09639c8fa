//! Durability: writes acknowledged before a `kill -9` survive a restart on the same data
//! directory, with the same indexes.

use crate::common;

use common::{fresh_loopback, try_request, Agent, TempDir};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn acknowledged_writes_survive_kill_9() {
    let data = TempDir::new("crash");
    let ip = fresh_loopback();
    let args: Vec<String> = [
        "agent",
        "-server",
        "-bootstrap",
        "-node",
        "crashy",
        "-bind",
        &ip.to_string(),
        "-client",
        &ip.to_string(),
        "-data-dir",
        data.path().to_str().unwrap(),
        "-dns-port=-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut agent = Agent::spawn(ip, 8500, args);
    agent.wait_ready();
    let addr = agent.addr();

    // Four writers each write their own keys until the agent dies under them.
    let acknowledged: Arc<Mutex<BTreeMap<String, String>>> = Arc::new(Mutex::new(BTreeMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let acknowledged = acknowledged.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("crash/w{writer}/{n:06}");
                    let value = format!("value-{writer}-{n}");
                    match try_request(addr, "PUT", &format!("/v1/kv/{key}"), value.as_bytes(), &[])
                    {
                        Ok(r) if r.status == 200 && r.body == b"true" => {
                            acknowledged.lock().unwrap().insert(key, value);
                        }
                        Ok(_) | Err(_) => {}
                    }
                    n += 1;
                }
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(700));
    // Record indexes of what is visible mid-stream, then crash while writes continue.
    let before = try_request(addr, "GET", "/v1/kv/crash/?recurse", b"", &[]).unwrap();
    assert_eq!(before.status, 200);
    let snapshot: Vec<serde_json::Value> = serde_json::from_slice(&before.body).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    agent.kill9();
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 100,
        "only {} writes acknowledged; the test needs a stream",
        acknowledged.len()
    );

    agent.restart();
    agent.wait_ready();
    let after = agent.get("/v1/kv/crash/?recurse");
    assert_eq!(after.status, 200);
    let recovered: BTreeMap<String, serde_json::Value> = after
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["Key"].as_str().unwrap().to_string(), e.clone()))
        .collect();
    use base64::Engine;
    for (key, value) in &acknowledged {
        let entry = recovered
            .get(key)
            .unwrap_or_else(|| panic!("acknowledged write {key} lost"));
        let stored = base64::engine::general_purpose::STANDARD
            .decode(entry["Value"].as_str().unwrap())
            .unwrap();
        assert_eq!(stored, value.as_bytes(), "{key}");
    }
    for entry in snapshot {
        let key = entry["Key"].as_str().unwrap();
        let now = &recovered[key];
        assert_eq!(now["CreateIndex"], entry["CreateIndex"], "{key}");
        assert_eq!(now["ModifyIndex"], entry["ModifyIndex"], "{key}");
    }
    // The recovered agent keeps accepting writes with indexes past everything recovered.
    let max_index = recovered
        .values()
        .map(|e| e["ModifyIndex"].as_u64().unwrap())
        .max()
        .unwrap();
    agent.put("/v1/kv/crash/after", b"x");
    assert!(agent.get("/v1/kv/crash/after").index() > max_index);
}
