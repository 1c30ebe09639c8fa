//! A configuration reload on the agent. SIGHUP (the main thread sends the call), `praetor
//! reload` and `PUT /v1/agent/reload` all end here, so the three behave the same.
//!
//! The sources are read again and everything is validated before anything changes: a
//! configuration that does not load, invalid service or check definitions, or certificate
//! files that do not load leave the agent as it was, and the error is the answer (and the
//! log line). Otherwise the agent takes in the TLS certificates, the log level, the services
//! and checks from the config, node metadata and the ACL tokens the config changed, hands
//! the new configuration to the reload listeners (the watch supervisor), and logs what it
//! applied and which changed settings take effect only after a restart. A reload never
//! stops the agent.

use super::Agent;
use crate::api::agent_channel::AgentReply;
use crate::config::acl::AclTokens;
use crate::config::reload::changes;
use crate::config::AgentConfig;
use std::rc::Rc;
use std::sync::Arc;

pub async fn reload(agent: &Rc<Agent>) -> AgentReply {
    let applied_before: Arc<AgentConfig> = agent.config.borrow().clone();
    let fresh = match crate::config::build(&applied_before.sources) {
        Ok(config) => config,
        Err(e) => return failed(format!("Failed reloading config: {e}")),
    };
    if let Err(e) = super::config_definitions(&fresh) {
        return failed(format!("Failed reloading services and checks: {e}"));
    }
    if crate::shard::logger::parse_level(&fresh.log_level).is_none() {
        return failed(format!(
            "Failed reloading config: Invalid log level: {}",
            fresh.log_level
        ));
    }
    // New certificates serve the next handshake; open connections keep theirs.
    match agent.shard.shared().tls.reload(&fresh.tls) {
        // The files are read on every reload, changed in the config or not: say which
        // set serves now.
        Ok(generation) => {
            log::info!("agent: reload: TLS certificates loaded (generation {generation})")
        }
        Err(e) => return failed(format!("Failed reloading tls configuration: {e}")),
    }
    if fresh.log_level != applied_before.log_level {
        // Validated above.
        let _ = crate::shard::logger::set_level(&fresh.log_level);
    }
    if let Err(e) = agent.load_config_definitions(&fresh) {
        return failed(format!("Failed reloading services and checks: {e}"));
    }
    update_config_tokens(agent, &applied_before.acl.tokens, &fresh.acl.tokens);
    agent
        .shard
        .shared()
        .node_meta
        .store(Arc::new(fresh.node_meta.clone()));

    // What changed since the last reload was applied now; what differs from the
    // configuration the process started with and is not reloadable still waits for a
    // restart, however many reloads ago it changed.
    if let Ok(listeners) = agent.shard.shared().reload_listeners.lock() {
        for listener in listeners.iter() {
            listener(&fresh);
        }
    }
    let since_last = changes(&applied_before.raw, &fresh.raw);
    let since_start = changes(&agent.shard.config().raw, &fresh.raw);
    report(&since_last.applied, &since_start.needs_restart);

    {
        let mut config = (*applied_before).clone();
        config.log_level = fresh.log_level.clone();
        config.node_meta = fresh.node_meta.clone();
        config.acl.tokens = fresh.acl.tokens.clone();
        config.tls = fresh.tls.clone();
        config.watches = fresh.watches.clone();
        config.raw = fresh.raw;
        *agent.config.borrow_mut() = Arc::new(config);
    }
    // Node metadata may have changed: the next sync compares the node registration.
    agent.state.borrow_mut().node_in_sync = false;
    agent.sync_now().await;
    AgentReply::empty()
}

fn failed(message: String) -> AgentReply {
    log::error!("agent: reload: {message}; the configuration in use stays");
    AgentReply::text(500, message)
}

fn report(applied: &[String], needs_restart: &[String]) {
    if applied.is_empty() {
        log::info!("agent: reload: done; nothing a reload applies changed");
    } else {
        log::info!("agent: reload: done; applied {}", applied.join(", "));
    }
    if !needs_restart.is_empty() {
        log::warn!(
            "agent: reload: changed, but in effect only after a restart: {}",
            needs_restart.join(", ")
        );
    }
}

/// Takes in the ACL tokens whose value the config changed. A token set through
/// `/v1/agent/token` stays until the config changes that same token.
fn update_config_tokens(agent: &Agent, before: &AclTokens, after: &AclTokens) {
    if before == after {
        return;
    }
    let Ok(mut tokens) = agent.shard.shared().acl_tokens.write() else {
        return;
    };
    let take = |current: &mut Option<String>, old: &Option<String>, new: &Option<String>| {
        if old != new {
            current.clone_from(new);
        }
    };
    take(
        &mut tokens.initial_management,
        &before.initial_management,
        &after.initial_management,
    );
    take(&mut tokens.agent, &before.agent, &after.agent);
    take(
        &mut tokens.agent_recovery,
        &before.agent_recovery,
        &after.agent_recovery,
    );
    take(&mut tokens.default, &before.default, &after.default);
    take(
        &mut tokens.replication,
        &before.replication,
        &after.replication,
    );
    take(
        &mut tokens.config_file_service_registration,
        &before.config_file_service_registration,
        &after.config_file_service_registration,
    );
}
