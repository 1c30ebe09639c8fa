//! The web UI over real HTTP, without a browser: how `/`, the content path and the assets
//! are answered (redirects, index.html for deep links, fingerprints, cache headers, gzip,
//! ETag revalidation, HEAD), the `ui_config` switches (`-ui-content-path`, `-ui-dir`, the
//! UI off), refusals at startup, and the `/v1/internal/ui/*` endpoints' shapes and blocking.

use crate::common;

use common::{praetor_binary, raw_exchange, request, Agent, HttpResponse, TempDir};
use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(agent: &Agent, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    request(agent.addr(), "GET", path, b"", headers)
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("a valid gzip body");
    out
}

/// The asset prefix index.html points at, e.g. `/ui/assets/0123456789ab/`.
fn asset_prefix(index: &str, content_path: &str) -> String {
    let marker = format!("{content_path}assets/");
    let start = index.find(&marker).expect("index.html links its assets");
    let rest = &index[start + marker.len()..];
    let fingerprint = &rest[..rest.find('/').unwrap()];
    assert_eq!(fingerprint.len(), 12, "{fingerprint}");
    assert!(fingerprint.bytes().all(|b| b.is_ascii_hexdigit()));
    format!("{marker}{fingerprint}/")
}

/// Waits (bounded) until the leader has registered its own `consul` service, the last
/// catalog write a fresh agent makes by itself, so that later indexes move only for ours.
fn settled(agent: &Agent) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let consul = get(agent, "/v1/catalog/service/consul", &[]);
        if consul.status == 200 && consul.json().as_array().is_some_and(|a| !a.is_empty()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the agent never registered its consul service");
}

fn register(agent: &Agent, node: &str, service: &str, status: &str) {
    let body = format!(
        r#"{{"Node":"{node}","Address":"10.9.0.1","Service":{{"Service":"{service}","ID":"{service}-1","Tags":["t1"]}},
            "Check":{{"CheckID":"{service}-check","Name":"{service} check","ServiceID":"{service}-1","Status":"{status}"}}}}"#
    );
    let r = agent.put("/v1/catalog/register", body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn root_redirects_to_the_ui_and_deep_links_load_index_html() {
    let agent = Agent::dev(&[]);
    let root = get(&agent, "/", &[]);
    assert_eq!(root.status, 301);
    assert_eq!(root.header("Location"), Some("/ui/"));
    let bare = get(&agent, "/ui", &[]);
    assert_eq!((bare.status, bare.header("Location")), (301, Some("/ui/")));

    let index = get(&agent, "/ui/", &[]);
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(index.header("Cache-Control"), Some("no-cache"));
    assert!(index
        .header("Content-Security-Policy")
        .is_some_and(|csp| csp.contains("script-src 'self'")));
    let text = index.text();
    assert!(text.contains(r#"<meta name="praetor-ui/settings" content="{&quot;"#));
    assert!(
        text.contains("&quot;Datacenter&quot;:&quot;dc1&quot;"),
        "{text}"
    );
    for deep in [
        "/ui/dc1/services",
        "/ui/dc1/services/web/instances",
        "/ui/dc1/kv/a/b/edit",
    ] {
        let page = get(&agent, deep, &[]);
        assert_eq!(page.status, 200, "{deep}");
        assert_eq!(page.body, index.body, "{deep} answers index.html");
    }
    let missing = get(&agent, "/ui/assets/missing.js", &[]);
    assert_eq!(missing.status, 404, "no index.html for a missing asset");
    let post = request(agent.addr(), "POST", "/ui/", b"", &[]);
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow"), Some("OPTIONS,GET,HEAD"));
    let robots = get(&agent, "/robots.txt", &[]);
    assert_eq!(
        (robots.status, robots.text().as_str()),
        (200, "User-agent: *\nDisallow: /\n")
    );
}

#[test]
fn assets_are_fingerprinted_cached_compressed_and_revalidated() {
    let agent = Agent::dev(&[]);
    let index = get(&agent, "/ui/", &[]).text();
    let prefix = asset_prefix(&index, "/ui/");
    let app = format!("{prefix}app.js");

    let plain = get(&agent, &app, &[]);
    assert_eq!(plain.status, 200);
    assert_eq!(
        plain.header("Content-Type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(
        plain.header("Cache-Control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(plain.header("Content-Encoding"), None);
    assert_eq!(plain.header("Vary"), Some("Accept-Encoding"));
    assert!(plain.text().contains("new Router"));

    let gzipped = get(&agent, &app, &[("Accept-Encoding", "gzip, deflate, br")]);
    assert_eq!(gzipped.header("Content-Encoding"), Some("gzip"));
    assert!(gzipped.body.len() < plain.body.len());
    assert_eq!(gunzip(&gzipped.body), plain.body);
    let refused = get(&agent, &app, &[("Accept-Encoding", "gzip;q=0")]);
    assert_eq!(refused.header("Content-Encoding"), None);

    // Revalidation: the ETag of each coding gives a 304 with no body.
    for (coding, response) in [("identity", &plain), ("gzip", &gzipped)] {
        let etag = response.header("ETag").expect("an ETag").to_string();
        let again = get(
            &agent,
            &app,
            &[("If-None-Match", &etag), ("Accept-Encoding", coding)],
        );
        assert_eq!(again.status, 304, "{coding}");
        assert!(again.body.is_empty());
        assert_eq!(again.header("Content-Length"), None);
        assert_eq!(again.header("ETag"), Some(etag.as_str()));
    }
    assert_ne!(plain.header("ETag"), gzipped.header("ETag"));

    // The same file without the fingerprint is revalidated; another build's is a 404.
    let unfingerprinted = get(&agent, "/ui/assets/app.js", &[]);
    assert_eq!(unfingerprinted.header("Cache-Control"), Some("no-cache"));
    assert_eq!(unfingerprinted.body, plain.body);
    assert_eq!(
        get(&agent, "/ui/assets/000000000000/app.js", &[]).status,
        404
    );

    // HEAD: the head of a GET, and no body, whatever the answer; pipelined behind it, the
    // next request on the connection is answered as if the HEAD had not been there.
    let raw = raw_exchange(
        agent.addr(),
        format!(
            "HEAD {app} HTTP/1.1\r\nHost: t\r\n\r\n\
             HEAD /ui/assets/nope.js HTTP/1.1\r\nHost: t\r\n\r\n\
             HEAD / HTTP/1.1\r\nHost: t\r\n\r\n\
             GET /robots.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
        Duration::from_secs(10),
    );
    let text = String::from_utf8_lossy(&raw);
    let heads: Vec<&str> = text.splitn(4, "\r\n\r\n").collect();
    assert_eq!(heads.len(), 4, "{text}");
    assert!(heads[0].starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        heads[0].contains(&format!("Content-Length: {}", plain.body.len())),
        "{text}"
    );
    assert!(heads[1].starts_with("HTTP/1.1 404 "), "{text}");
    assert!(heads[2].starts_with("HTTP/1.1 301 "), "{text}");
    assert!(heads[3].starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(heads[3].ends_with("User-agent: *\nDisallow: /\n"), "{text}");
}

#[test]
fn the_ui_moves_with_its_content_path_and_can_be_off() {
    let moved = Agent::dev(&["-ui-content-path", "console"]);
    let root = get(&moved, "/", &[]);
    assert_eq!(root.header("Location"), Some("/console/"));
    let index = get(&moved, "/console/dc1/nodes", &[]);
    assert_eq!(index.status, 200);
    let prefix = asset_prefix(&index.text(), "/console/");
    assert_eq!(get(&moved, &format!("{prefix}style.css"), &[]).status, 200);
    assert!(index
        .text()
        .contains("&quot;ContentPath&quot;:&quot;/console/&quot;"));
    assert_eq!(get(&moved, "/ui/", &[]).status, 404);

    let off = Agent::dev(&["-hcl", "ui_config { enabled = false }"]);
    let root = get(&off, "/", &[]);
    assert_eq!(root.status, 200);
    assert_eq!(
        root.text(),
        "Consul Agent: UI disabled. To enable, set ui_config.enabled=true in the agent configuration and restart."
    );
    assert_eq!(get(&off, "/ui/", &[]).status, 404);
    let proxy = get(&off, "/v1/internal/ui/metrics-proxy/api/v1/query", &[]);
    assert_eq!(
        (proxy.status, proxy.text().as_str()),
        (404, "UI is not enabled")
    );
}

#[test]
fn a_ui_directory_is_served_instead_of_the_embedded_ui() {
    let dir = TempDir::new("ui-dir");
    std::fs::create_dir_all(dir.path().join("assets")).unwrap();
    std::fs::write(
        dir.path().join("index.html"),
        "<html><head><meta name=\"praetor-ui/settings\" content=\"{{SETTINGS}}\"></head>\
         <body><script src=\"{{ASSETS}}mine.js\"></script>custom</body></html>",
    )
    .unwrap();
    std::fs::write(dir.path().join("assets/mine.js"), "// mine").unwrap();
    let agent = Agent::dev(&["-ui-dir", &dir.path().display().to_string()]);
    let index = get(&agent, "/ui/dc1/services", &[]);
    assert!(index.text().contains("custom"), "{}", index.text());
    assert!(index.text().contains("&quot;Datacenter&quot;"));
    assert_eq!(
        index.header("Content-Security-Policy"),
        None,
        "a UI of one's own sets its own policy"
    );
    let prefix = asset_prefix(&index.text(), "/ui/");
    let mine = get(&agent, &format!("{prefix}mine.js"), &[]);
    assert_eq!((mine.status, mine.text().as_str()), (200, "// mine"));
    assert_eq!(get(&agent, "/ui/assets/app.js", &[]).status, 404);
}

/// Runs the agent with `args` and expects it to refuse to start with `needle` in its log.
fn refuses_to_start(args: &[&str], needle: &str) {
    let data = TempDir::new("ui-refusal");
    let ip = common::fresh_loopback().to_string();
    let data_dir = data.path().display().to_string();
    let mut all = vec![
        "agent",
        "-dev",
        "-bind",
        &ip,
        "-client",
        &ip,
        "-dns-port=-1",
        "-data-dir",
        &data_dir,
    ];
    all.extend_from_slice(args);
    let mut child = Command::new(praetor_binary())
        .args(&all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the agent started with {args:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

#[test]
fn bad_ui_settings_stop_the_agent_with_a_reason() {
    refuses_to_start(
        &["-ui-content-path", "/v1/"],
        "ui-content-path cannot have 'v[0-9]'",
    );
    refuses_to_start(
        &["-ui-content-path", "/a b/"],
        "ui-content-path can only contain alphanumeric",
    );
    refuses_to_start(
        &["-ui-dir", "/nonexistent/praetor-ui"],
        "ui_config.dir /nonexistent/praetor-ui",
    );
    let empty = TempDir::new("ui-empty");
    refuses_to_start(
        &["-ui-dir", &empty.path().display().to_string()],
        "no index.html",
    );
    refuses_to_start(
        &[
            "-hcl",
            "ui_config {\n dashboard_url_templates {\n service = \"ftp://x\"\n }\n }",
        ],
        "ui_config.dashboard_url_templates values must be a valid http or https URL",
    );
}

#[test]
fn internal_ui_endpoints_answer_in_consuls_shapes() {
    let agent = Agent::dev(&[]);
    settled(&agent);
    register(&agent, "n1", "web", "passing");
    register(&agent, "n2", "web", "critical");
    register(&agent, "n2", "db", "warning");

    let services = get(&agent, "/v1/internal/ui/services", &[]);
    assert_eq!(services.status, 200);
    assert!(services.index() > 0);
    let list = services.json();
    let web = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "web")
        .expect("web is listed")
        .clone();
    assert_eq!(web["InstanceCount"], 2);
    assert_eq!(web["Nodes"], serde_json::json!(["n1", "n2"]));
    assert_eq!(web["Tags"], serde_json::json!(["t1"]));
    assert_eq!(
        (
            &web["ChecksPassing"],
            &web["ChecksWarning"],
            &web["ChecksCritical"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(0),
            &serde_json::json!(1)
        )
    );
    assert_eq!(web["ExternalSources"], serde_json::Value::Null);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name");

    let filtered = get(
        &agent,
        "/v1/internal/ui/services?filter=Node.Node%20%3D%3D%20n1",
        &[],
    )
    .json();
    assert_eq!(filtered.as_array().unwrap().len(), 1, "{filtered}");
    assert_eq!(filtered[0]["InstanceCount"], 1);
    let bad = get(
        &agent,
        "/v1/internal/ui/services?filter=Nope%20%3D%3D%201",
        &[],
    );
    assert_eq!(bad.status, 400, "{}", bad.text());

    // Compressed when asked, and the same document.
    let gzipped = get(
        &agent,
        "/v1/internal/ui/services",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(gzipped.header("Content-Encoding"), Some("gzip"));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&gunzip(&gzipped.body)).unwrap(),
        list
    );

    let nodes = get(&agent, "/v1/internal/ui/nodes", &[]).json();
    let n2 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["Node"] == "n2")
        .unwrap();
    assert_eq!(n2["Services"].as_array().unwrap().len(), 2);
    assert_eq!(n2["Checks"].as_array().unwrap().len(), 2);
    assert_eq!(n2["TaggedAddresses"], serde_json::Value::Null);
    let only_n1 = get(
        &agent,
        "/v1/internal/ui/nodes?filter=Node%20%3D%3D%20n1",
        &[],
    )
    .json();
    assert_eq!(only_n1.as_array().unwrap().len(), 1);

    let node = get(&agent, "/v1/internal/ui/node/n1", &[]);
    assert_eq!(node.json()["Services"][0]["Service"], "web");
    let unknown = get(&agent, "/v1/internal/ui/node/nobody", &[]);
    assert_eq!((unknown.status, unknown.body.len()), (404, 0));

    let overview = get(&agent, "/v1/internal/ui/catalog-overview", &[]).json();
    let web_overview = overview["Services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "web")
        .unwrap();
    assert_eq!(web_overview["Total"], 2);
    assert_eq!(web_overview["Passing"], 1);
    assert_eq!(web_overview["Critical"], 1);
    assert!(overview["Nodes"][0].get("Name").is_none());
    assert!(overview["Nodes"][0]["Total"].as_u64().unwrap() >= 3);

    let exported = get(&agent, "/v1/internal/ui/exported-services", &[]);
    assert_eq!(
        (exported.status, exported.text().as_str()),
        (500, "must provide PeerName")
    );
    let exported = get(&agent, "/v1/internal/ui/exported-services?peer=p1", &[]);
    assert_eq!(exported.json(), serde_json::json!([]));
    let gateway = get(&agent, "/v1/internal/ui/gateway-services-nodes/gw", &[]);
    assert_eq!(
        (gateway.status, gateway.json()),
        (200, serde_json::json!([]))
    );
    let gateway = get(&agent, "/v1/internal/ui/gateway-services-nodes/", &[]);
    assert_eq!(
        (gateway.status, gateway.text().as_str()),
        (400, "Missing gateway name")
    );
    let proxy = get(&agent, "/v1/internal/ui/metrics-proxy/api/v1/query", &[]);
    assert_eq!(
        (proxy.status, proxy.text().as_str()),
        (404, "Metrics proxy is not enabled")
    );
    let put = request(agent.addr(), "PUT", "/v1/internal/ui/services", b"", &[]);
    assert_eq!(put.status, 405);
    let other_dc = get(&agent, "/v1/internal/ui/services?dc=elsewhere", &[]);
    assert_eq!(other_dc.status, 500);
}

#[test]
fn the_services_summary_is_a_blocking_query() {
    let agent = Agent::dev(&[]);
    settled(&agent);
    register(&agent, "n1", "web", "passing");
    let first = get(&agent, "/v1/internal/ui/services", &[]);
    let index = first.index();
    let addr: SocketAddr = agent.addr();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let woken = request(
            addr,
            "GET",
            &format!("/v1/internal/ui/services?index={index}&wait=20s"),
            b"",
            &[],
        );
        (woken, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    register(&agent, "n1", "web", "critical");
    let (woken, elapsed) = waiter.join().unwrap();
    assert!(woken.index() > index);
    assert!(
        elapsed < Duration::from_secs(10),
        "woken by the change, not the wait"
    );
    let web = woken
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "web")
        .cloned()
        .expect("web is listed");
    assert_eq!(web["ChecksCritical"], 1, "{web}");

    // Unchanged, it waits out its (short) wait and answers the same index.
    let started = Instant::now();
    let idle = get(
        &agent,
        &format!(
            "/v1/internal/ui/services?index={}&wait=300ms",
            woken.index()
        ),
        &[],
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(idle.index(), woken.index());
}

/// Registers `name` through the agent with a sidecar whose upstreams are `upstreams`.
fn register_with_sidecar(agent: &Agent, name: &str, upstreams: &[&str]) {
    let upstreams: Vec<serde_json::Value> = upstreams
        .iter()
        .enumerate()
        .map(|(i, u)| serde_json::json!({"DestinationName": u, "LocalBindPort": 19100 + i}))
        .collect();
    let body = serde_json::json!({
        "Name": name, "Port": 9000,
        "Connect": {"SidecarService": {"Proxy": {"Upstreams": upstreams}}}
    });
    let r = agent.put("/v1/agent/service/register", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The services summary folds each sidecar into its service (`ConnectedWithProxy`, the
/// proxy's checks counted there) and still lists the proxy with its `Kind`, as Consul's
/// endpoint does (Consul's UI leaves the proxies out of its list); the topology of a
/// service names its upstreams and downstreams from the proxy registrations, with the
/// intention decision for each, and a routing-only upstream by name.
#[test]
fn sidecars_fold_into_their_service_and_the_topology_follows_registrations_and_intentions() {
    let agent = Agent::dev(&[]);
    settled(&agent);
    register_with_sidecar(&agent, "db", &[]);
    register_with_sidecar(&agent, "web", &["db", "cache", "ghost"]);
    let resolver = br#"{"Kind": "service-resolver", "Name": "cache", "ConnectTimeout": "5s"}"#;
    assert_eq!(agent.put("/v1/config", resolver).text(), "true\n");
    let deny = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        br#"{"Action": "deny", "Description": "not yet"}"#,
    );
    assert_eq!(deny.text(), "true\n");

    let list = get(&agent, "/v1/internal/ui/services", &[]).json();
    let by_name = |name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["Name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {list}"))
    };
    let db = by_name("db");
    assert_eq!(db["ConnectedWithProxy"], true, "{db}");
    assert!(db.get("Kind").is_none(), "{db}");
    // db's own instance has no check; the node's serfHealth and the sidecar's two checks
    // count for it, each once.
    let total = |s: &serde_json::Value| {
        ["ChecksPassing", "ChecksWarning", "ChecksCritical"]
            .iter()
            .map(|k| s[k].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(total(&db), 3, "{db}");
    let proxy = by_name("db-sidecar-proxy");
    assert_eq!(proxy["Kind"], "connect-proxy", "{proxy}");
    assert_eq!(proxy["ConnectedWithProxy"], false);
    assert_eq!(proxy["TransparentProxy"], false);

    let topology = get(&agent, "/v1/internal/ui/service-topology/web?kind=", &[]);
    assert_eq!(topology.status, 200, "{}", topology.text());
    assert!(topology.index() > 0);
    let web = topology.json();
    assert_eq!(web["Protocol"], "tcp", "{web}");
    assert_eq!(web["TransparentProxy"], false);
    assert_eq!(web["FilteredByACLs"], false);
    assert_eq!(web["Downstreams"], serde_json::json!([]));
    let upstreams = web["Upstreams"].as_array().unwrap();
    let names: Vec<&str> = upstreams
        .iter()
        .map(|u| u["Name"].as_str().unwrap())
        .collect();
    // ghost has neither instances nor routing configuration: not listed, as in Consul.
    assert_eq!(names, ["db", "cache"], "{web}");
    assert_eq!(upstreams[0]["Source"], "proxy-registration");
    assert_eq!(upstreams[0]["InstanceCount"], 1);
    assert_eq!(total(&upstreams[0]), 3);
    assert_eq!(
        upstreams[0]["Intention"],
        serde_json::json!({"DefaultAllow": true, "Allowed": false, "HasPermissions": false,
                           "ExternalSource": "", "HasExact": true})
    );
    assert_eq!(upstreams[1]["Source"], "routing-config");
    assert_eq!(upstreams[1]["InstanceCount"], 0);
    assert_eq!(upstreams[1]["Nodes"], serde_json::Value::Null);
    assert_eq!(upstreams[1]["Datacenter"], "dc1");
    assert_eq!(upstreams[1]["Intention"]["Allowed"], true, "{web}");
    assert_eq!(upstreams[1]["Intention"]["HasExact"], false);

    let db_topology = get(&agent, "/v1/internal/ui/service-topology/db?kind=", &[]).json();
    assert_eq!(db_topology["Upstreams"], serde_json::json!([]));
    let downstreams = db_topology["Downstreams"].as_array().unwrap();
    assert_eq!(downstreams.len(), 1, "{db_topology}");
    assert_eq!(downstreams[0]["Name"], "web");
    assert_eq!(downstreams[0]["Source"], "proxy-registration");
    assert_eq!(downstreams[0]["Intention"]["Allowed"], false);

    // A blocking read of the topology wakes when an intention changes.
    let index = get(&agent, "/v1/internal/ui/service-topology/web?kind=", &[]).index();
    let addr = agent.addr();
    let waiter = std::thread::spawn(move || {
        request(
            addr,
            "GET",
            &format!("/v1/internal/ui/service-topology/web?kind=&index={index}&wait=20s"),
            b"",
            &[],
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let allow = agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        br#"{"Action": "allow"}"#,
    );
    assert_eq!(allow.text(), "true\n");
    // The sidecars' checks may move the catalog first: follow the index until the allow
    // shows, each read a blocking one.
    let mut woken = waiter.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while woken.json()["Upstreams"][0]["Intention"]["Allowed"] != true {
        assert!(woken.index() > index, "{}", woken.text());
        assert!(Instant::now() < deadline, "{}", woken.text());
        let path = format!(
            "/v1/internal/ui/service-topology/web?kind=&index={}&wait=5s",
            woken.index()
        );
        woken = get(&agent, &path, &[]);
    }

    // Consul's refusals.
    for (path, status, text) in [
        (
            "/v1/internal/ui/service-topology/web",
            400,
            "Missing service kind",
        ),
        (
            "/v1/internal/ui/service-topology/web?kind=connect-proxy",
            400,
            "Unsupported service kind \"connect-proxy\"",
        ),
        (
            "/v1/internal/ui/service-topology/?kind=",
            400,
            "Missing service name",
        ),
    ] {
        let answer = get(&agent, path, &[]);
        assert_eq!(
            (answer.status, answer.text().as_str()),
            (status, text),
            "{path}"
        );
    }
}

/// A `-dev` agent with ACLs on (default deny) and `management` as its initial management
/// token, returned once that token resolves.
fn acl_agent(management: &str) -> Agent {
    let acl = format!(
        "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{management}\" }} }}"
    );
    let agent = Agent::dev(&["-hcl", &acl]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(&agent, "GET", "/v1/acl/token/self", b"", Some(management)).status != 200 {
        assert!(
            Instant::now() < deadline,
            "the management token never resolved"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    agent
}

/// A request with `token` as `X-Consul-Token`, or none.
fn call(agent: &Agent, method: &str, path: &str, body: &[u8], token: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
    request(agent.addr(), method, path, body, &headers)
}

/// A token holding one new policy of `rules`, made with `management`.
fn token_with_rules(agent: &Agent, management: &str, name: &str, rules: &str) -> String {
    let body = serde_json::json!({"Name": name, "Rules": rules}).to_string();
    let policy = call(
        agent,
        "PUT",
        "/v1/acl/policy",
        body.as_bytes(),
        Some(management),
    );
    assert_eq!(policy.status, 200, "{}", policy.text());
    let body = serde_json::json!({"Policies": [{"Name": name}]}).to_string();
    let token = call(
        agent,
        "PUT",
        "/v1/acl/token",
        body.as_bytes(),
        Some(management),
    );
    assert_eq!(token.status, 200, "{}", token.text());
    token.json()["SecretID"].as_str().unwrap().to_string()
}

/// With ACLs, the topology needs `service:read` on the service, and leaves out the
/// neighbours the token may not read, saying so in the body and the header.
#[test]
fn the_topology_is_filtered_by_the_token() {
    const MANAGEMENT: &str = "7b1d2c3e-0000-4000-8000-0000000000ac";
    let agent = acl_agent(MANAGEMENT);
    let call = |method: &str, path: &str, body: &[u8], token: &str| {
        call(&agent, method, path, body, Some(token))
    };
    for (name, upstreams) in [("db", vec![]), ("web", vec!["db"])] {
        let upstreams: Vec<serde_json::Value> = upstreams
            .iter()
            .map(|u| serde_json::json!({"DestinationName": u, "LocalBindPort": 19200}))
            .collect();
        let body = serde_json::json!({"Name": name, "Port": 9000,
            "Connect": {"SidecarService": {"Proxy": {"Upstreams": upstreams}}}});
        let r = call(
            "PUT",
            "/v1/agent/service/register",
            body.to_string().as_bytes(),
            MANAGEMENT,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let topology = |name: &str, token: &str| {
        call(
            "GET",
            &format!("/v1/internal/ui/service-topology/{name}?kind="),
            b"",
            token,
        )
    };
    let rules = r#"service_prefix "web" { policy = "read" } node_prefix "" { policy = "read" }"#;
    let token = token_with_rules(&agent, MANAGEMENT, "web-only", rules);

    let full = topology("web", MANAGEMENT).json();
    assert_eq!(full["Upstreams"][0]["Name"], "db", "{full}");
    let web = topology("web", &token);
    assert_eq!(web.status, 200, "{}", web.text());
    assert_eq!(
        web.json()["Upstreams"],
        serde_json::json!([]),
        "{}",
        web.text()
    );
    assert_eq!(web.json()["FilteredByACLs"], true);
    assert_eq!(
        web.header("X-Consul-Results-Filtered-By-ACLs"),
        Some("true")
    );
    let db = topology("db", &token);
    assert_eq!(db.status, 403, "{}", db.text());
    assert!(
        db.text()
            .contains("lacks permission 'service:read' on \"db\""),
        "{}",
        db.text()
    );
}

/// What the UI's lists rely on to say that ACLs hid rows: `X-Consul-Results-Filtered-By-ACLs`
/// on every list a token's filter cut, including a KV folder the filter emptied, which
/// Consul answers with a 404 that still carries the header; never to an anonymous caller.
#[test]
fn lists_a_token_may_not_fully_read_say_so_in_a_header() {
    const MANAGEMENT: &str = "7b1d2c3e-0000-4000-8000-0000000000ad";
    let agent = acl_agent(MANAGEMENT);
    let call = |method: &str, path: &str, body: &[u8], token: Option<&str>| {
        call(&agent, method, path, body, token)
    };
    for key in ["open/a", "secret/b"] {
        assert_eq!(
            call("PUT", &format!("/v1/kv/{key}"), b"x", Some(MANAGEMENT)).status,
            200
        );
    }
    let rules = r#"key_prefix "open/" { policy = "read" } service_prefix "" { policy = "read" }"#;
    let token = token_with_rules(&agent, MANAGEMENT, "open-keys", rules);
    const HEADER: &str = "X-Consul-Results-Filtered-By-ACLs";

    let root = call("GET", "/v1/kv/?keys&separator=/", b"", Some(&token));
    assert_eq!(
        (root.status, root.json()),
        (200, serde_json::json!(["open/"]))
    );
    assert_eq!(root.header(HEADER), Some("true"));
    let folder = call("GET", "/v1/kv/secret/?keys&separator=/", b"", Some(&token));
    assert_eq!((folder.status, folder.header(HEADER)), (404, Some("true")));
    let recurse = call("GET", "/v1/kv/secret/?recurse", b"", Some(&token));
    assert_eq!(
        (recurse.status, recurse.header(HEADER)),
        (404, Some("true"))
    );
    let open = call("GET", "/v1/kv/open/?keys&separator=/", b"", Some(&token));
    assert_eq!((open.status, open.header(HEADER)), (200, None));
    // Anonymous is not told.
    let anonymous = call("GET", "/v1/kv/secret/?keys&separator=/", b"", None);
    assert_eq!((anonymous.status, anonymous.header(HEADER)), (404, None));
    // The node list: the token may read no node.
    let nodes = call("GET", "/v1/internal/ui/nodes", b"", Some(&token));
    assert_eq!(
        (nodes.json(), nodes.header(HEADER)),
        (serde_json::json!([]), Some("true"))
    );
}
