//! The watch plans of the agent's configuration (`watches`), run as `praetor watch`
//! processes against the agent's own HTTP address and supervised by one thread here.
//!
//! Each plan is one child process, the same program an operator runs by hand, so a plan
//! behaves exactly as `praetor watch` with the same flags: blocking queries, the handler run
//! with the data on its stdin and `CONSUL_INDEX` in its environment. Where the command ends a
//! watch whose handler failed, Consul's agent logs the failure and carries on; the supervisor
//! does the same by restarting the plan after a pause (1 s, doubling to 30 s while it keeps
//! failing quickly). A reload replaces the plans that changed and leaves the others running;
//! shutdown stops them all, and a child dies with the agent even when the agent is killed
//! (`PR_SET_PDEATHSIG`). The plan's `token`, else the agent's default token, reaches the
//! child through its environment (`CONSUL_HTTP_TOKEN`), not its command line; no other
//! `CONSUL_*` variable of the agent's environment is passed on.

use crate::config::watches::{WatchConfig, WatchHandler};
use crate::config::AgentConfig;
use crate::shard::runtime::Shared;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the supervisor looks at its children.
const SUPERVISE_TICK: Duration = Duration::from_secs(1);
/// Pause before restarting a plan that ended; doubles while it keeps ending quickly.
const RESTART_DELAY_FIRST: Duration = Duration::from_secs(1);
const RESTART_DELAY_MAX: Duration = Duration::from_secs(30);
/// A plan that ran this long before ending starts over from the first delay.
const RUN_TIME_HEALTHY: Duration = Duration::from_secs(60);
/// How long a stopped plan gets to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

enum Request {
    Replace(Vec<WatchConfig>),
    Stop,
}

/// The running supervisor: replace its plans (a reload) or stop it (shutdown).
pub struct WatchSupervisor {
    requests: Sender<Request>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchSupervisor {
    /// Starts the supervisor with the configuration's plans.
    pub fn start(config: &AgentConfig, shared: Arc<Shared>) -> Result<WatchSupervisor, String> {
        let (requests, inbox) = std::sync::mpsc::channel();
        let address = agent_address(config);
        if address.is_none() && !config.watches.is_empty() {
            log::warn!("agent: watches need the HTTP port (ports.http); none runs");
        }
        let program =
            std::env::current_exe().map_err(|e| format!("watches: cannot find praetor: {e}"))?;
        let mut supervisor = Supervisor {
            launcher: Launcher {
                program: program.into_os_string(),
                address,
                shared,
            },
            plans: Vec::new(),
        };
        supervisor.replace(config.watches.clone());
        let thread = std::thread::Builder::new()
            .name("praetor-watches".into())
            .spawn(move || supervisor.run(inbox))
            .map_err(|e| format!("cannot start the watch supervisor: {e}"))?;
        Ok(WatchSupervisor {
            requests,
            thread: Some(thread),
        })
    }

    /// A reload listener for `Shared::reload_listeners`: hands the new plans over.
    pub fn listener(&self) -> crate::shard::runtime::ReloadListener {
        let requests = self.requests.clone();
        Box::new(move |config: &AgentConfig| {
            let _ = requests.send(Request::Replace(config.watches.clone()));
        })
    }

    /// Stops every plan and the supervisor.
    pub fn stop(mut self) {
        let _ = self.requests.send(Request::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where a child reaches the agent: its first client address (loopback for a wildcard)
/// on the HTTP port.
fn agent_address(config: &AgentConfig) -> Option<String> {
    if config.ports.http < 0 {
        return None;
    }
    let ip = match config.client_addrs.first()? {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => *ip,
    };
    Some(SocketAddr::new(ip, config.ports.http as u16).to_string())
}

/// The `praetor watch` arguments of a plan.
fn watch_arguments(plan: &WatchConfig, address: &str) -> Vec<String> {
    let mut args = vec![
        "watch".to_string(),
        "-http-addr".to_string(),
        address.to_string(),
        format!("-type={}", plan.watch_type),
    ];
    for (key, value) in &plan.params {
        if key != "token" {
            args.push(format!("-{key}={value}"));
        }
    }
    for tag in &plan.tags {
        args.push(format!("-tag={tag}"));
    }
    if plan.passing_only {
        args.push("-passingonly=true".to_string());
    }
    match &plan.handler {
        WatchHandler::Shell(command) => args.push(format!("-handler={command}")),
        WatchHandler::Exec(command) => {
            args.push("-shell=false".to_string());
            args.push("--".to_string());
            args.extend(command.iter().cloned());
        }
    }
    args
}

struct Plan {
    config: WatchConfig,
    child: Option<Child>,
    started: Instant,
    restart_at: Option<Instant>,
    delay: Duration,
}

/// What starting a plan needs.
struct Launcher {
    program: std::ffi::OsString,
    address: Option<String>,
    shared: Arc<Shared>,
}

struct Supervisor {
    launcher: Launcher,
    plans: Vec<Plan>,
}

impl Supervisor {
    fn run(mut self, inbox: Receiver<Request>) {
        loop {
            match inbox.recv_timeout(SUPERVISE_TICK) {
                Ok(Request::Replace(configs)) => self.replace(configs),
                Ok(Request::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    for plan in &mut self.plans {
                        stop(plan);
                    }
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.tend();
        }
    }

    /// Keeps the plans that did not change, stops the others, starts the new ones.
    fn replace(&mut self, configs: Vec<WatchConfig>) {
        let (mut kept, gone): (Vec<Plan>, Vec<Plan>) = std::mem::take(&mut self.plans)
            .into_iter()
            .partition(|plan| configs.contains(&plan.config));
        for mut plan in gone {
            log::info!("agent: watch of type {} removed", plan.config.watch_type);
            stop(&mut plan);
        }
        for config in configs {
            if kept.iter().any(|plan| plan.config == config) {
                continue;
            }
            let mut plan = Plan {
                config,
                child: None,
                started: Instant::now(),
                restart_at: None,
                delay: RESTART_DELAY_FIRST,
            };
            self.launcher.spawn(&mut plan);
            kept.push(plan);
        }
        self.plans = kept;
    }

    /// Restarts plans that ended, after their pause.
    fn tend(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        for (i, plan) in self.plans.iter_mut().enumerate() {
            if let Some(child) = plan.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    plan.child = None;
                    if plan.started.elapsed() >= RUN_TIME_HEALTHY {
                        plan.delay = RESTART_DELAY_FIRST;
                    }
                    log::warn!(
                        "agent: watch of type {} ended ({status}); restarting in {} s",
                        plan.config.watch_type,
                        plan.delay.as_secs()
                    );
                    plan.restart_at = Some(now + plan.delay);
                    plan.delay = (plan.delay * 2).min(RESTART_DELAY_MAX);
                }
            }
            if plan.child.is_none() && plan.restart_at.is_some_and(|at| at <= now) {
                due.push(i);
            }
        }
        for i in due {
            self.launcher.spawn(&mut self.plans[i]);
        }
    }
}

impl Launcher {
    fn spawn(&self, plan: &mut Plan) {
        plan.restart_at = None;
        plan.started = Instant::now();
        let Some(address) = &self.address else {
            return;
        };
        let token = plan
            .config
            .params
            .iter()
            .find(|(key, _)| key == "token")
            .map(|(_, token)| token.clone())
            .or_else(|| {
                self.shared
                    .acl_tokens
                    .read()
                    .ok()
                    .and_then(|tokens| tokens.default.clone())
            });
        let mut command = Command::new(&self.program);
        crate::agent::child::inherit_only_stdio(&mut command)
            .args(watch_arguments(&plan.config, address))
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CONSUL_") {
                command.env_remove(name);
            }
        }
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            command.env("CONSUL_HTTP_TOKEN", token);
        }
        // SAFETY: prctl only changes this child's own death signal, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        match command.spawn() {
            Ok(child) => {
                log::info!(
                    "agent: watch of type {} started (process {})",
                    plan.config.watch_type,
                    child.id()
                );
                plan.child = Some(child);
            }
            Err(error) => {
                log::error!(
                    "agent: watch of type {} cannot start: {error}; retrying in {} s",
                    plan.config.watch_type,
                    plan.delay.as_secs()
                );
                plan.restart_at = Some(Instant::now() + plan.delay);
                plan.delay = (plan.delay * 2).min(RESTART_DELAY_MAX);
            }
        }
    }
}

/// SIGTERM, then SIGKILL after [`STOP_GRACE`].
fn stop(plan: &mut Plan) {
    let Some(mut child) = plan.child.take() else {
        return;
    };
    // SAFETY: signalling a child process we started, by its PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_become_praetor_watch_command_lines() {
        let plan = WatchConfig {
            watch_type: "service".into(),
            params: vec![
                ("service".into(), "web".into()),
                ("token".into(), "secret".into()),
            ],
            tags: vec!["v1".into()],
            passing_only: true,
            handler: WatchHandler::Exec(vec!["/bin/sh".into(), "-c".into(), "cat".into()]),
        };
        assert_eq!(
            watch_arguments(&plan, "127.0.0.1:8500"),
            vec![
                "watch",
                "-http-addr",
                "127.0.0.1:8500",
                "-type=service",
                "-service=web",
                "-tag=v1",
                "-passingonly=true",
                "-shell=false",
                "--",
                "/bin/sh",
                "-c",
                "cat"
            ]
        );
        let shell = WatchConfig {
            handler: WatchHandler::Shell("cat >> out".into()),
            ..plan
        };
        assert_eq!(
            watch_arguments(&shell, "x").last().map(String::as_str),
            Some("-handler=cat >> out")
        );
    }
}
