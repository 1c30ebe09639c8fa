//! The agent endpoints' work on shard 0: each [`AgentCall`] carries a request parsed by the
//! shard that received it (`api::agent_local`) and a channel for the finished answer
//! (status, headers, body), which that shard writes to its client. Answers are rendered
//! here because the local state lives here.

use super::local::{
    LocalCheck, Source, DEFAULT_NODE_MAINTENANCE_REASON, DEFAULT_SERVICE_MAINTENANCE_REASON,
    NODE_MAINTENANCE_ID, SERVICE_MAINTENANCE_PREFIX,
};
use super::{scripts_allowed, Agent};
use crate::api::agent_channel::{AgentCall, AgentReply, AgentRequest};
use crate::api::authz::RowFilter;
use crate::consul::bodies;
use crate::consul::body::{parse_strict, Obj};
use crate::consul::definition::{self, CheckKind};
use crate::consul::filter::{self, Filter};
use crate::consul::json::JsonWriter;
use crate::consul::metrics;
use crate::consul::render;
use crate::store::catalog::apply::{check_row, instance_row};
use crate::store::catalog::read::aggregate;
use crate::store::catalog::{HealthCheck, ServiceInstance, Status};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Receives calls from every shard and answers each in its own task (some wait for a sync).
pub async fn serve_calls(agent: Rc<Agent>, calls: flume::Receiver<AgentCall>) {
    while let Ok(call) = calls.recv_async().await {
        if agent.shard.shutting_down() {
            return;
        }
        let agent = agent.clone();
        monoio::spawn(async move {
            let queued_before = agent.persist_queued();
            let reply = handle(&agent, call.request, call.pretty).await;
            // A call that changed persisted state answers once the change is durable.
            if agent.persist_queued() != queued_before {
                agent.persisted().await;
            }
            let _ = call.reply.send(reply);
        });
    }
}

async fn handle(agent: &Rc<Agent>, request: AgentRequest, pretty: bool) -> AgentReply {
    match request {
        AgentRequest::Services { filter, rows } => services(agent, &filter, &rows, pretty),
        AgentRequest::Service { id, hash, wait } => service(agent, &id, hash, wait, pretty).await,
        AgentRequest::Checks { filter, rows } => checks(agent, &filter, &rows, pretty),
        AgentRequest::RegisterService {
            body,
            replace_existing_checks,
            token,
        } => register_service(agent, &body, replace_existing_checks, &token).await,
        AgentRequest::DeregisterService { id } => {
            if !agent.remove_service(&id) {
                return AgentReply::text(
                    404,
                    format!("Unknown service ID {id:?}. Ensure that the service ID is passed, not the service name."),
                );
            }
            agent.sync_now().await;
            AgentReply::empty()
        }
        AgentRequest::RegisterCheck { body, token } => register_check(agent, &body, &token).await,
        AgentRequest::DeregisterCheck { id } => {
            if !agent.remove_check(&id) {
                return AgentReply::text(
                    404,
                    format!("Unknown check ID {id:?}. Ensure that the check ID is passed, not the check name."),
                );
            }
            agent.sync_now().await;
            AgentReply::empty()
        }
        AgentRequest::UpdateTtl { id, status, output } => {
            update_ttl(agent, &id, status, &output).await
        }
        AgentRequest::ServiceMaintenance { id, enable, reason } => {
            service_maintenance(agent, &id, enable, &reason).await
        }
        AgentRequest::NodeMaintenance { enable, reason } => {
            if enable {
                let reason = if reason.is_empty() {
                    DEFAULT_NODE_MAINTENANCE_REASON
                } else {
                    &reason
                };
                agent.add_maintenance(NODE_MAINTENANCE_ID, "Node Maintenance Mode", "", reason);
            } else {
                agent.remove_check(NODE_MAINTENANCE_ID);
            }
            agent.sync_now().await;
            AgentReply::empty()
        }
        AgentRequest::HealthByName { name, text } => health_by_name(agent, &name, text, pretty),
        AgentRequest::HealthById { id, text } => health_by_id(agent, &id, text, pretty),
        AgentRequest::Reload => super::reload::reload(agent).await,
        AgentRequest::Metrics { prometheus } => {
            super::telemetry::metrics_reply(agent, prometheus, pretty)
        }
        AgentRequest::MetricsStream { chunks } => {
            agent.telemetry.subscribe(chunks);
            AgentReply::empty()
        }
        AgentRequest::ConnectLeaf {
            service,
            dns_sans,
            min_index,
            wait,
            token,
        } => {
            super::connect::leaf::serve(agent, &service, &dns_sans, min_index, wait, token, pretty)
                .await
        }
        AgentRequest::DatacenterCall {
            datacenter,
            method,
            body,
            timeout,
        } => super::datacenter_read::call(agent, &datacenter, method, &body, timeout).await,
        AgentRequest::Datacenters => super::datacenter_read::datacenters(agent).await,
        AgentRequest::Leadership => {
            let leads = agent.config.borrow().server && agent.shard.is_leader();
            AgentReply::text(200, if leads { "true" } else { "false" })
        }
        AgentRequest::Propose { command } => {
            if !agent.config.borrow().server {
                return AgentReply::text(500, "only a server proposes store writes");
            }
            match agent
                .shard
                .propose(command)
                .await
                .into_command_result()
                .refusal()
            {
                Some(reason) => AgentReply::text(500, reason),
                None => AgentReply::empty(),
            }
        }
    }
}

/// The catalog-shaped row of a local service, for rendering.
fn service_row(agent: &Agent, id: &str) -> Option<ServiceInstance> {
    let state = agent.state.borrow();
    let service = state.services.get(id)?;
    Some(instance_row(
        &service.registration,
        arcstr::ArcStr::from(agent.node_name().as_str()),
        None,
        None,
        0,
    ))
}

fn check_row_of(agent: &Agent, check: &LocalCheck) -> HealthCheck {
    let node = agent.node_name();
    let state = agent.state.borrow();
    let registration = state.check_registration(check, &node);
    let service = state.services.get(&check.service_id).map(|s| {
        instance_row(
            &s.registration,
            arcstr::ArcStr::from(node.as_str()),
            None,
            None,
            0,
        )
    });
    check_row(
        &registration,
        arcstr::ArcStr::from(node.as_str()),
        service.as_ref(),
        None,
        0,
    )
}

fn services(agent: &Agent, filter_text: &str, rows: &RowFilter, pretty: bool) -> AgentReply {
    let filter = match Filter::parse(filter_text, filter::AGENT_SERVICE) {
        Ok(f) => f,
        Err(e) => {
            return AgentReply::text(
                400,
                format!("Failed to create boolean expression evaluator: {e}"),
            )
        }
    };
    let datacenter = agent.config.borrow().datacenter.clone();
    let ids: Vec<String> = agent.state.borrow().services.keys().cloned().collect();
    let mut body = Vec::with_capacity(256 + ids.len() * 256);
    let mut w = JsonWriter::new(&mut body, pretty);
    let mut hidden = false;
    w.begin_object();
    for id in ids {
        let Some(row) = service_row(agent, &id) else {
            continue;
        };
        if !rows.service(&row.name) {
            hidden = true;
            continue;
        }
        if let Some(filter) = &filter {
            if !filter.matches(&render::as_value(|w| {
                w.begin_object();
                render::agent_service_fields(w, &row, &datacenter, None);
                w.end_object();
            })) {
                continue;
            }
        }
        w.field_object(&id);
        render::agent_service_fields(&mut w, &row, &datacenter, None);
        w.end_object();
    }
    w.end_object();
    w.finish();
    filtered_reply(rows, hidden, body)
}

/// A JSON answer, with Consul's header when the token hid some of its rows.
fn filtered_reply(rows: &RowFilter, hidden: bool, body: Vec<u8>) -> AgentReply {
    let mut reply = AgentReply::json(200, body);
    rows.write_header(hidden, &mut reply.headers);
    reply
}

/// 64-bit FNV-1a, rendered as hex: the `ContentHash` of an agent service.
fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    format!("{hash:016x}")
}

/// `GET /v1/agent/service/<id>`, with Consul's hash-based blocking (`?hash=…&wait=…`).
async fn service(
    agent: &Agent,
    id: &str,
    hash: Option<String>,
    wait: Duration,
    pretty: bool,
) -> AgentReply {
    let deadline = Instant::now() + wait;
    loop {
        let datacenter = agent.config.borrow().datacenter.clone();
        let Some(row) = service_row(agent, id) else {
            return AgentReply::text(404, format!("unknown service ID: {id}"));
        };
        let render_with = |hash: Option<&str>, pretty: bool| {
            let mut body = Vec::with_capacity(512);
            let mut w = JsonWriter::new(&mut body, pretty);
            w.begin_object();
            render::agent_service_fields(&mut w, &row, &datacenter, hash);
            w.end_object();
            w.finish();
            body
        };
        let current = content_hash(&render_with(None, false));
        let unchanged = hash.as_deref() == Some(current.as_str());
        if !unchanged || Instant::now() >= deadline {
            let mut reply = AgentReply::json(200, render_with(Some(&current), pretty));
            reply.headers = format!("X-Consul-ContentHash: {current}\r\n").into_bytes();
            return reply;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let _ = monoio::time::timeout(remaining, agent.changed.wait()).await;
    }
}

fn checks(agent: &Agent, filter_text: &str, rows: &RowFilter, pretty: bool) -> AgentReply {
    let filter = match Filter::parse(filter_text, filter::HEALTH_CHECK) {
        Ok(f) => f,
        Err(e) => {
            return AgentReply::text(
                400,
                format!("Failed to create boolean expression evaluator: {e}"),
            )
        }
    };
    let checks: Vec<LocalCheck> = agent.state.borrow().checks.values().cloned().collect();
    let node_name = agent.config.borrow().node_name.clone();
    let mut body = Vec::with_capacity(256 + checks.len() * 512);
    let mut w = JsonWriter::new(&mut body, pretty);
    let mut hidden = false;
    w.begin_object();
    for check in &checks {
        let row = check_row_of(agent, check);
        // A service check needs read on its service, a node check read on this node.
        let readable = if row.service_id.is_empty() {
            rows.node(&node_name)
        } else {
            rows.service(&row.service_name)
        };
        if !readable {
            hidden = true;
            continue;
        }
        if let Some(filter) = &filter {
            if !filter.matches(&render::as_value(|w| render::health_check(w, &row))) {
                continue;
            }
        }
        w.field_object(&check.id);
        render::health_check_fields(&mut w, &row);
        w.end_object();
    }
    w.end_object();
    w.finish();
    filtered_reply(rows, hidden, body)
}

fn decode_error(status: u16, message: String) -> AgentReply {
    AgentReply::text(status, message)
}

/// The token a registration is synced with: its body's `Token`, else the request's.
fn registration_token(obj: &Obj, request_token: &str) -> String {
    match obj.opt_string(&["token"]) {
        Ok(Some(token)) if !token.is_empty() => token,
        _ => request_token.to_string(),
    }
}

async fn register_service(
    agent: &Rc<Agent>,
    body: &[u8],
    replace_existing_checks: bool,
    request_token: &str,
) -> AgentReply {
    let value = match parse_strict(body, &bodies::SERVICE_DEFINITION) {
        Ok(v) => v,
        Err(e) => return decode_error(400, format!("Request decode failed: {e}")),
    };
    let obj = match Obj::new(&value) {
        Ok(o) => o,
        Err(e) => return decode_error(400, format!("Request decode failed: {e}")),
    };
    let def = match definition::parse_service_definition(&obj) {
        Ok(def) => def,
        Err(e) => return decode_error(e.status, e.message),
    };
    if def.checks.iter().any(|c| c.kind == CheckKind::Script) {
        let config = agent.config.borrow().clone();
        if let Err(e) = scripts_allowed(&config, Source::Api) {
            return AgentReply::text(500, e);
        }
    }
    let definitions = match agent.with_sidecar(def) {
        Ok(definitions) => definitions,
        Err(e) => return decode_error(e.status, e.message),
    };
    crate::telemetry::incr(metrics::Counter::AgentServiceRegisters);
    // A sidecar registered with its service syncs with the service's token, as in Consul.
    let token = registration_token(&obj, request_token);
    for def in definitions {
        agent.set_service_token(&def.service.id, &token);
        agent.add_service(def, Source::Api, replace_existing_checks);
    }
    agent.sync_now().await;
    AgentReply::empty()
}

async fn register_check(agent: &Rc<Agent>, body: &[u8], request_token: &str) -> AgentReply {
    let value = match parse_strict(body, &bodies::CHECK_DEFINITION) {
        Ok(v) => v,
        Err(e) => return decode_error(400, format!("Request decode failed: {e}")),
    };
    let obj = match Obj::new(&value) {
        Ok(o) => o,
        Err(e) => return decode_error(400, format!("Request decode failed: {e}")),
    };
    let check = match definition::parse_check_registration(&obj) {
        Ok(c) => c,
        Err(e) => return decode_error(e.status, e.message),
    };
    if !check.service_id.is_empty()
        && !agent
            .state
            .borrow()
            .services
            .contains_key(&check.service_id)
    {
        return AgentReply::text(
            404,
            format!("ServiceID {:?} does not exist", check.service_id),
        );
    }
    if check.kind == CheckKind::Script {
        let config = agent.config.borrow().clone();
        if let Err(e) = scripts_allowed(&config, Source::Api) {
            return AgentReply::text(500, e);
        }
    }
    agent.set_check_token(&check.id, &registration_token(&obj, request_token));
    agent.add_check(check, Source::Api);
    agent.sync_now().await;
    AgentReply::empty()
}

async fn update_ttl(agent: &Agent, id: &str, status: Status, output: &str) -> AgentReply {
    let kind = agent
        .state
        .borrow()
        .checks
        .get(id)
        .map(|c| c.spec.as_ref().map(|s| s.kind));
    match kind {
        None => {
            return AgentReply::text(
                404,
                format!(
                "Unknown check ID {id:?}. Ensure that the check ID is passed, not the check name."
            ),
            )
        }
        Some(Some(CheckKind::Ttl)) => {}
        Some(_) => {
            return AgentReply::text(500, format!("CheckID {id:?} does not have associated TTL"))
        }
    }
    let output =
        crate::agent::checks::cap_output(output.to_string(), definition::CHECK_OUTPUT_BYTES_MAX);
    let now = Instant::now();
    let update = {
        let mut state = agent.state.borrow_mut();
        state.renew_ttl(id, now);
        state.set_check(id, status, &output, now)
    };
    agent.persist_check_state(id);
    agent.apply_update(update);
    agent.sync_now().await;
    AgentReply::empty()
}

async fn service_maintenance(agent: &Agent, id: &str, enable: bool, reason: &str) -> AgentReply {
    if !agent.state.borrow().services.contains_key(id) {
        return AgentReply::text(404, format!("No service registered with ID {id:?}"));
    }
    let check_id = format!("{SERVICE_MAINTENANCE_PREFIX}{id}");
    if enable {
        let reason = if reason.is_empty() {
            DEFAULT_SERVICE_MAINTENANCE_REASON
        } else {
            reason
        };
        agent.add_maintenance(&check_id, "Service Maintenance Mode", id, reason);
    } else {
        agent.remove_check(&check_id);
    }
    agent.sync_now().await;
    AgentReply::empty()
}

/// Consul's aggregated status of a service on this agent: maintenance wins, then
/// critical, warning, passing; with the HTTP code Consul maps it to.
fn service_health(agent: &Agent, id: &str) -> (u16, &'static str, Vec<HealthCheck>) {
    let checks: Vec<LocalCheck> = {
        let state = agent.state.borrow();
        state
            .checks
            .values()
            .filter(|c| c.service_id == id || c.service_id.is_empty())
            .cloned()
            .collect()
    };
    let maintenance = checks.iter().any(|c| c.is_maintenance());
    let status = aggregate(checks.iter().map(|c| c.status));
    let (code, text) = if maintenance {
        (503, "maintenance")
    } else {
        match status {
            Status::Passing => (200, "passing"),
            Status::Warning => (429, "warning"),
            Status::Critical | Status::Maintenance => (503, "critical"),
        }
    };
    let rows = checks.iter().map(|c| check_row_of(agent, c)).collect();
    (code, text, rows)
}

fn write_health_info(
    w: &mut JsonWriter,
    status: &str,
    service: &ServiceInstance,
    datacenter: &str,
    checks: &[HealthCheck],
) {
    w.begin_object();
    w.field_str("AggregatedStatus", status);
    w.field_object("Service");
    render::agent_service_fields(w, service, datacenter, None);
    w.end_object();
    w.field_array("Checks");
    for check in checks {
        render::health_check(w, check);
    }
    w.end_array();
    w.end_object();
}

fn health_by_id(agent: &Agent, id: &str, text: bool, pretty: bool) -> AgentReply {
    let datacenter = agent.config.borrow().datacenter.clone();
    let Some(row) = service_row(agent, id) else {
        let reason = format!("ServiceId {id} not found");
        if text {
            return AgentReply::text(404, reason);
        }
        let body: &[u8] = if pretty {
            b"{\n    \"AggregatedStatus\": \"critical\",\n    \"Service\": null,\n    \"Checks\": null\n}\n"
        } else {
            b"{\"AggregatedStatus\":\"critical\",\"Service\":null,\"Checks\":null}"
        };
        return AgentReply::json(404, body.to_vec());
    };
    let (code, status, checks) = service_health(agent, id);
    if text {
        return AgentReply::text(code, status);
    }
    let mut body = Vec::with_capacity(1024);
    let mut w = JsonWriter::new(&mut body, pretty);
    write_health_info(&mut w, status, &row, &datacenter, &checks);
    w.finish();
    AgentReply::json(code, body)
}

fn health_by_name(agent: &Agent, name: &str, text: bool, pretty: bool) -> AgentReply {
    let datacenter = agent.config.borrow().datacenter.clone();
    let ids: Vec<String> = agent
        .state
        .borrow()
        .services
        .values()
        .filter(|s| s.registration.name == name)
        .map(|s| s.registration.id.clone())
        .collect();
    let mut code = 404;
    let mut overall = format!("ServiceName {name} Not Found");
    let mut body = Vec::with_capacity(1024);
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_array();
    for id in ids {
        let Some(row) = service_row(agent, &id) else {
            continue;
        };
        let (service_code, status, checks) = service_health(agent, &id);
        write_health_info(&mut w, status, &row, &datacenter, &checks);
        // The worst instance decides: 200 < 429 < 503.
        if code == 404 || service_code > code {
            code = service_code;
            overall = status.to_string();
        }
    }
    w.end_array();
    w.finish();
    if text {
        return AgentReply::text(code, overall);
    }
    AgentReply::json(code, body)
}
