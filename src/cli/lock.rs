//! `praetor lock [-n N] [-timeout D] [-monitor-retry N] [-name S] [-pass-stdin] PREFIX CMD…`:
//! Consul's `consul lock`, built on the same HTTP calls as Consul's Go API (`api.Lock` and
//! `api.Semaphore`), so praetor and Consul clients can contend for the same locks.
//!
//! With `-n 1` it holds a lock on `PREFIX/.lock` (flags `0x2ddccbc058a50c18`); with `-n N > 1`
//! a semaphore: a contender key `PREFIX/<session>` per holder candidate plus `PREFIX/.lock`
//! holding `{"Limit":N,"Holders":{…}}` (flags `0xe0f69a2baa414de0`), updated with CAS. The
//! session has a 15 s TTL renewed every TTL/2 (semaphore sessions use the `delete` behavior so
//! contender keys vanish with them).
//!
//! Once held, the child command runs (through `$SHELL -c`, or `/bin/sh -c`, unless
//! `-shell=false`) with `CONSUL_LOCK_HELD=true`. A monitor keeps a consistent blocking query on
//! the lock; when the lock is lost (session invalidated, key released or deleted, or the agent
//! unreachable for `-monitor-retry` tries), the child gets SIGTERM, then SIGKILL after 5 s.
//! When the child exits, or on SIGINT/SIGTERM, the lock is released, the session destroyed,
//! and the lock key removed if nobody else uses it.
//!
//! Threads: the main thread acquires, supervises the child and releases; one thread renews
//! the session; one monitors the lock. They talk through an atomic stop flag and a channel.

use super::client::{encode_path, encode_query_value, Client, ClientOptions, Response};
use super::HttpFlags;
use clap::{ArgAction, Args};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flags of a lock key (Consul's `api.LockFlagValue`).
pub const LOCK_FLAG_VALUE: u64 = 0x2ddc_cbc0_58a5_0c18;
/// Flags of a semaphore's keys (Consul's `api.SemaphoreFlagValue`).
pub const SEMAPHORE_FLAG_VALUE: u64 = 0xe0f6_9a2b_aa41_4de0;
/// The key under the prefix that holds the lock or the semaphore state.
pub const LOCK_KEY_NAME: &str = ".lock";
/// TTL of the lock's session (Consul's `DefaultLockSessionTTL`).
const SESSION_TTL: Duration = Duration::from_secs(15);
const SESSION_TTL_TEXT: &str = "15s";
/// How long one blocking read of the lock waits (Consul's `DefaultLockWaitTime`).
const LOCK_WAIT: Duration = Duration::from_secs(15);
/// Pause before retrying an acquisition refused by a lock-delay (`DefaultLockRetryTime`).
const LOCK_DELAY_RETRY: Duration = Duration::from_secs(5);
/// Grace between SIGTERM and SIGKILL for the child (`lockKillGracePeriod`).
const KILL_GRACE: Duration = Duration::from_secs(5);
/// Pause between monitor retries after an error (`defaultMonitorRetryTime`).
const MONITOR_RETRY_WAIT: Duration = Duration::from_secs(1);
/// Pause between renewals after a failed one.
const RENEW_RETRY_WAIT: Duration = Duration::from_secs(1);
/// How often the supervising loop looks at the child and the signal flag.
const SUPERVISE_TICK: Duration = Duration::from_millis(50);
/// Longest `-n` accepted: every holder is listed in one KV value.
const SEMAPHORE_LIMIT_MAX: i64 = 4096;

#[derive(Args, Debug)]
pub struct LockArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Number of concurrent holders; above 1 the lock becomes a semaphore.
    #[arg(
        short = 'n',
        long = "n",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub limit: i64,
    /// Name of the lock session (default: derived from the command and prefix).
    #[arg(long)]
    pub name: Option<String>,
    /// Pass this process's stdin to the child.
    #[arg(long = "pass-stdin")]
    pub pass_stdin: bool,
    /// Longest wait for the lock, as a Go duration; 0 waits forever.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Deprecated alias of -timeout.
    #[arg(long = "try", value_parser = parse_duration)]
    pub try_timeout: Option<Duration>,
    /// Errors tolerated while monitoring the lock before giving it up (1 s apart).
    #[arg(
        long = "monitor-retry",
        default_value_t = 3,
        allow_negative_numbers = true
    )]
    pub monitor_retry: i64,
    /// Run the child through a shell (`-shell=false` to exec it directly).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub shell: bool,
    /// Exit 2 when the child failed, instead of 0.
    #[arg(long = "child-exit-code")]
    pub child_exit_code: bool,
    /// Log what the lock does (acquire, monitor, release) on standard error.
    #[arg(long)]
    pub verbose: bool,
    /// Key prefix of the lock.
    pub prefix: Option<String>,
    /// The command to run while holding the lock.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub child: Vec<String>,
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::proto::duration::parse_go_duration(text).map_err(|e| e.to_string())
}

// Signals: SIGINT and SIGTERM ask the command to stop the child and release.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    LAST_SIGNAL.store(signal, Ordering::SeqCst);
    SHUTDOWN.store(true, Ordering::SeqCst);
}

pub(crate) fn install_shutdown_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing an async-signal-safe handler that only stores to atomics.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

pub(crate) fn shutdown_requested() -> bool {
    SHUTDOWN.load(Ordering::SeqCst)
}

/// `prefix/name` as Go's `path.Join` builds it for these keys.
pub fn join_key(prefix: &str, name: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// One KV entry as the lock code reads it.
#[derive(Clone, Debug, Default)]
struct Pair {
    key: String,
    flags: u64,
    session: String,
    value: Vec<u8>,
    modify_index: u64,
}

fn parse_pairs(body: &[u8]) -> Result<Vec<Pair>, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("malformed KV answer: {e}"))?;
    let mut pairs = Vec::new();
    for item in value.as_array().into_iter().flatten() {
        use base64::Engine;
        let raw = item["Value"].as_str().unwrap_or("");
        pairs.push(Pair {
            key: item["Key"].as_str().unwrap_or("").to_string(),
            flags: item["Flags"].as_u64().unwrap_or(0),
            session: item["Session"].as_str().unwrap_or("").to_string(),
            value: base64::engine::general_purpose::STANDARD
                .decode(raw)
                .unwrap_or_default(),
            modify_index: item["ModifyIndex"].as_u64().unwrap_or(0),
        });
    }
    Ok(pairs)
}

fn index_of(response: &Response) -> u64 {
    response
        .header("X-Consul-Index")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A failed call that Consul's API retries while monitoring: no answer at all, or a 500.
fn retryable(result: &Result<Response, String>) -> bool {
    match result {
        Err(_) => true,
        Ok(response) => response.status == 500,
    }
}

/// GET a key; `None` when it does not exist.
fn get_key(client: &Client, key: &str, query: &str) -> Result<(Option<Pair>, u64), String> {
    let target = format!("/v1/kv/{}{query}", encode_path(key));
    let response = client.request("GET", &target, None)?;
    match response.status {
        200 => Ok((parse_pairs(&response.body)?.pop(), index_of(&response))),
        404 => Ok((None, index_of(&response))),
        status => Err(format!(
            "Unexpected response code: {status} ({})",
            response.body_text()
        )),
    }
}

/// GET every key under a prefix.
fn list_prefix(client: &Client, prefix: &str, query: &str) -> Result<(Vec<Pair>, u64), String> {
    let target = format!("/v1/kv/{}?recurse{query}", encode_path(prefix));
    let response = client.request("GET", &target, None)?;
    match response.status {
        200 => Ok((parse_pairs(&response.body)?, index_of(&response))),
        404 => Ok((Vec::new(), index_of(&response))),
        status => Err(format!(
            "Unexpected response code: {status} ({})",
            response.body_text()
        )),
    }
}

/// A KV write answering `true`/`false`.
fn put_bool(client: &Client, target: &str, body: &[u8]) -> Result<bool, String> {
    let response = client.request("PUT", target, Some(body))?;
    if response.status != 200 {
        return Err(format!(
            "Unexpected response code: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    Ok(response.body_text() == "true")
}

fn delete_bool(client: &Client, target: &str) -> Result<bool, String> {
    let response = client.request("DELETE", target, None)?;
    if response.status != 200 {
        return Err(format!(
            "Unexpected response code: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    Ok(response.body_text() == "true")
}

/// Sleeps up to `duration`, returning early (true) when a shutdown was requested.
fn sleep_or_shutdown(duration: Duration) -> bool {
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        if shutdown_requested() {
            return true;
        }
        std::thread::sleep(SUPERVISE_TICK.min(deadline - Instant::now()));
    }
    shutdown_requested()
}

/// Creates the lock session (TTL 15 s; `delete` behavior for semaphores).
fn create_session(client: &Client, name: &str, semaphore: bool) -> Result<String, String> {
    let mut body = serde_json::json!({ "Name": name, "TTL": SESSION_TTL_TEXT });
    if semaphore {
        body["Behavior"] = Value::from("delete");
    }
    let response = client.request(
        "PUT",
        "/v1/session/create",
        Some(body.to_string().as_bytes()),
    )?;
    if response.status != 200 {
        return Err(format!(
            "failed to create session: Unexpected response code: {} ({})",
            response.status,
            response.body_text()
        ));
    }
    let value: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("failed to create session: {e}"))?;
    value["ID"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "failed to create session: no ID in the answer".to_string())
}

/// Keeps the session alive every TTL/2 until `stop` is set, then destroys it (Consul's
/// `RenewPeriodic`). Gives up quietly once the session is gone or a whole TTL passed without
/// a successful renewal: the lock monitor notices the loss.
fn renew_periodically(options: ClientOptions, session: String, stop: Arc<AtomicBool>) {
    let client = Client::new(options);
    let mut wait = SESSION_TTL / 2;
    let mut last_renewed = Instant::now();
    loop {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(SUPERVISE_TICK.min(deadline - Instant::now()));
        }
        if stop.load(Ordering::SeqCst) {
            let _ = client.request("PUT", &format!("/v1/session/destroy/{session}"), None);
            return;
        }
        if last_renewed.elapsed() > SESSION_TTL {
            return;
        }
        match client.request("PUT", &format!("/v1/session/renew/{session}"), None) {
            Ok(response) if response.status == 200 => {
                last_renewed = Instant::now();
                wait = SESSION_TTL / 2;
            }
            Ok(response) if response.status == 404 => return,
            _ => wait = RENEW_RETRY_WAIT,
        }
    }
}

/// The lock or semaphore this command holds.
struct Holder {
    client: Client,
    options: ClientOptions,
    prefix: String,
    limit: i64,
    session: String,
    verbose: bool,
}

impl Holder {
    fn semaphore(&self) -> bool {
        self.limit > 1
    }
    fn lock_key(&self) -> String {
        join_key(&self.prefix, LOCK_KEY_NAME)
    }
    fn info(&self, message: &str) {
        if self.verbose {
            eprintln!("{message}");
        }
    }

    /// Waits for the lock; `Ok(false)` on timeout or shutdown.
    fn acquire(&self, timeout: Option<Duration>) -> Result<bool, String> {
        if self.semaphore() {
            self.acquire_semaphore(timeout)
        } else {
            self.acquire_lock(timeout)
        }
    }

    /// The wait of the next blocking read, or `None` when the timeout has passed.
    fn next_wait(timeout: Option<Duration>, start: Instant, attempts: u32) -> Option<Duration> {
        match timeout {
            None => Some(LOCK_WAIT),
            Some(limit) if attempts == 0 => Some(limit),
            Some(limit) => limit.checked_sub(start.elapsed()).filter(|d| !d.is_zero()),
        }
    }

    fn acquire_lock(&self, timeout: Option<Duration>) -> Result<bool, String> {
        let key = self.lock_key();
        let start = Instant::now();
        let mut attempts = 0;
        let mut wait_index = 0u64;
        loop {
            if shutdown_requested() {
                return Ok(false);
            }
            let Some(wait) = Self::next_wait(timeout, start, attempts) else {
                return Ok(false);
            };
            attempts += 1;
            let query = format!("?index={wait_index}&wait={}ms", wait.as_millis().max(1));
            let (pair, index) = get_key(&self.client, &key, &query)
                .map_err(|e| format!("failed to read lock: {e}"))?;
            if let Some(pair) = &pair {
                if pair.flags != LOCK_FLAG_VALUE {
                    return Err("Existing key does not match lock use".to_string());
                }
                if pair.session == self.session {
                    return Ok(true);
                }
                if !pair.session.is_empty() {
                    wait_index = index;
                    continue;
                }
            }
            let target = format!(
                "/v1/kv/{}?acquire={}&flags={LOCK_FLAG_VALUE}",
                encode_path(&key),
                encode_query_value(&self.session)
            );
            let locked = put_bool(&self.client, &target, b"")
                .map_err(|e| format!("failed to acquire lock: {e}"))?;
            if locked {
                return Ok(true);
            }
            // Taken meanwhile (block on it), or free but inside a lock-delay (retry later).
            let (pair, index) = get_key(&self.client, &key, "")?;
            if pair.is_some_and(|p| !p.session.is_empty()) {
                wait_index = index;
            } else {
                self.info("Lock is inside its lock-delay; retrying");
                wait_index = 0;
                if sleep_or_shutdown(LOCK_DELAY_RETRY) {
                    return Ok(false);
                }
            }
        }
    }

    fn find_lock(&self, pairs: &[Pair]) -> Pair {
        let key = self.lock_key();
        pairs
            .iter()
            .find(|p| p.key == key)
            .cloned()
            .unwrap_or(Pair {
                flags: SEMAPHORE_FLAG_VALUE,
                ..Default::default()
            })
    }

    /// The semaphore state held in `.lock` as stored.
    fn decode_semaphore_raw(&self, lock: &Pair) -> Result<SemaphoreState, String> {
        if lock.value.is_empty() {
            return Ok(SemaphoreState {
                limit: self.limit,
                holders: BTreeMap::new(),
            });
        }
        let value: Value = serde_json::from_slice(&lock.value)
            .map_err(|e| format!("lock decoding failed: {e}"))?;
        Ok(SemaphoreState {
            limit: value["Limit"].as_i64().unwrap_or(0),
            holders: value["Holders"]
                .as_object()
                .map(|m| m.keys().map(|k| (k.clone(), true)).collect())
                .unwrap_or_default(),
        })
    }

    /// The semaphore state with dead holders (no live contender key under the prefix) pruned.
    fn decode_semaphore(&self, lock: &Pair, pairs: &[Pair]) -> Result<SemaphoreState, String> {
        let mut state = self.decode_semaphore_raw(lock)?;
        let alive: std::collections::HashSet<&str> = pairs
            .iter()
            .filter(|p| !p.session.is_empty())
            .map(|p| p.session.as_str())
            .collect();
        state
            .holders
            .retain(|holder, _| alive.contains(holder.as_str()));
        Ok(state)
    }

    fn acquire_semaphore(&self, timeout: Option<Duration>) -> Result<bool, String> {
        let contender = join_key(&self.prefix, &self.session);
        let target = format!(
            "/v1/kv/{}?acquire={}&flags={SEMAPHORE_FLAG_VALUE}",
            encode_path(&contender),
            encode_query_value(&self.session)
        );
        match put_bool(&self.client, &target, b"") {
            Ok(true) => {}
            Ok(false) => return Err("failed to make contender entry: not acquired".to_string()),
            Err(e) => return Err(format!("failed to make contender entry: {e}")),
        }
        let start = Instant::now();
        let mut attempts = 0;
        let mut wait_index = 0u64;
        loop {
            if shutdown_requested() {
                return Ok(false);
            }
            let Some(wait) = Self::next_wait(timeout, start, attempts) else {
                return Ok(false);
            };
            attempts += 1;
            let query = format!("&index={wait_index}&wait={}ms", wait.as_millis().max(1));
            let (pairs, index) = list_prefix(&self.client, &self.prefix, &query)
                .map_err(|e| format!("failed to read prefix: {e}"))?;
            let lock = self.find_lock(&pairs);
            if lock.flags != SEMAPHORE_FLAG_VALUE {
                return Err("Existing key does not match semaphore use".to_string());
            }
            let mut state = self.decode_semaphore(&lock, &pairs)?;
            if state.limit != self.limit {
                return Err(format!(
                    "semaphore limit conflict (lock: {}, local: {})",
                    state.limit, self.limit
                ));
            }
            if state.holders.len() as i64 >= state.limit {
                wait_index = index;
                continue;
            }
            state.holders.insert(self.session.clone(), true);
            if self.write_semaphore(&state, lock.modify_index)? {
                return Ok(true);
            }
            // Another contender updated the state first: read it again.
            wait_index = index;
        }
    }

    /// CAS-writes the semaphore state over the version read at `modify_index`.
    fn write_semaphore(&self, state: &SemaphoreState, modify_index: u64) -> Result<bool, String> {
        // Go's field order: `{"Limit":N,"Holders":{…}}`.
        let holders = serde_json::to_string(&state.holders).expect("a map of strings encodes");
        let body = format!("{{\"Limit\":{},\"Holders\":{holders}}}", state.limit);
        let target = format!(
            "/v1/kv/{}?cas={modify_index}&flags={SEMAPHORE_FLAG_VALUE}",
            encode_path(&self.lock_key())
        );
        put_bool(&self.client, &target, body.as_bytes())
            .map_err(|e| format!("failed to update lock: {e}"))
    }

    /// Starts the thread that reports (on `lost`) when the lock or slot is no longer ours.
    fn monitor(&self, retries: u32, lost: Sender<()>) {
        let options = self.options.clone();
        let key = self.lock_key();
        let prefix = self.prefix.clone();
        let session = self.session.clone();
        let limit = self.limit;
        let verbose = self.verbose;
        std::thread::spawn(move || {
            let holder = Holder {
                client: Client::new(options.clone()),
                options,
                prefix,
                limit,
                session,
                verbose,
            };
            let mut wait_index = 0u64;
            'wait: loop {
                let mut retries_left = retries;
                loop {
                    let still_ours = if holder.semaphore() {
                        holder.check_slot(wait_index)
                    } else {
                        holder.check_lock(&key, wait_index)
                    };
                    match still_ours {
                        Ok(Some(index)) => {
                            wait_index = index;
                            continue 'wait;
                        }
                        Ok(None) => break 'wait,
                        Err(true) if retries_left > 0 => {
                            retries_left -= 1;
                            wait_index = 0;
                            std::thread::sleep(MONITOR_RETRY_WAIT);
                        }
                        Err(_) => break 'wait,
                    }
                }
            }
            let _ = lost.send(());
        });
    }

    /// One consistent blocking read of the lock: `Ok(Some(index))` while we hold it,
    /// `Ok(None)` once we do not, `Err(retryable)` when the read failed.
    fn check_lock(&self, key: &str, wait_index: u64) -> Result<Option<u64>, bool> {
        let target = format!("/v1/kv/{}?consistent&index={wait_index}", encode_path(key));
        let result = self.client.request("GET", &target, None);
        if retryable(&result) {
            return Err(true);
        }
        let response = result.expect("not an error");
        match response.status {
            200 => {
                let pairs = parse_pairs(&response.body).map_err(|_| false)?;
                let ours = pairs.first().is_some_and(|p| p.session == self.session);
                Ok(ours.then(|| index_of(&response)))
            }
            404 => Ok(None),
            _ => Err(false),
        }
    }

    fn check_slot(&self, wait_index: u64) -> Result<Option<u64>, bool> {
        let target = format!(
            "/v1/kv/{}?recurse&consistent&index={wait_index}",
            encode_path(&self.prefix)
        );
        let result = self.client.request("GET", &target, None);
        if retryable(&result) {
            return Err(true);
        }
        let response = result.expect("not an error");
        let pairs = match response.status {
            200 => parse_pairs(&response.body).map_err(|_| false)?,
            404 => Vec::new(),
            _ => return Err(false),
        };
        let lock = self.find_lock(&pairs);
        let state = self.decode_semaphore(&lock, &pairs).map_err(|_| false)?;
        let ours = state.holders.contains_key(&self.session);
        Ok(ours.then(|| index_of(&response)))
    }

    /// Gives the lock or slot up.
    fn release(&self) -> Result<(), String> {
        if !self.semaphore() {
            let target = format!(
                "/v1/kv/{}?release={}&flags={LOCK_FLAG_VALUE}",
                encode_path(&self.lock_key()),
                encode_query_value(&self.session)
            );
            put_bool(&self.client, &target, b"")
                .map_err(|e| format!("failed to release lock: {e}"))?;
            return Ok(());
        }
        loop {
            let (lock, _) = get_key(&self.client, &self.lock_key(), "")?;
            let lock = lock.unwrap_or_default();
            // Dead holders are pruned by the next acquirer; here only our own entry matters.
            let mut state = self.decode_semaphore_raw(&lock)?;
            if state.holders.remove(&self.session).is_none() {
                break;
            }
            if self.write_semaphore(&state, lock.modify_index)? {
                break;
            }
        }
        let contender = join_key(&self.prefix, &self.session);
        delete_bool(&self.client, &format!("/v1/kv/{}", encode_path(&contender)))?;
        Ok(())
    }

    /// Removes the lock key when nobody holds it (Consul's `Destroy`); `Ok(false)` when it is
    /// in use.
    fn cleanup(&self) -> Result<bool, String> {
        if !self.semaphore() {
            let (pair, _) = get_key(&self.client, &self.lock_key(), "")
                .map_err(|e| format!("failed to read lock: {e}"))?;
            let Some(pair) = pair else {
                return Ok(true);
            };
            if pair.flags != LOCK_FLAG_VALUE {
                return Err("Existing key does not match lock use".to_string());
            }
            if !pair.session.is_empty() {
                return Ok(false);
            }
            let target = format!(
                "/v1/kv/{}?cas={}",
                encode_path(&self.lock_key()),
                pair.modify_index
            );
            return delete_bool(&self.client, &target)
                .map_err(|e| format!("failed to remove lock: {e}"));
        }
        let (pairs, _) = list_prefix(&self.client, &self.prefix, "")
            .map_err(|e| format!("failed to read prefix: {e}"))?;
        let lock = self.find_lock(&pairs);
        if lock.modify_index == 0 {
            return Ok(true);
        }
        if lock.flags != SEMAPHORE_FLAG_VALUE {
            return Err("Existing key does not match semaphore use".to_string());
        }
        let state = self.decode_semaphore(&lock, &pairs)?;
        if !state.holders.is_empty() {
            return Ok(false);
        }
        let target = format!(
            "/v1/kv/{}?cas={}",
            encode_path(&self.lock_key()),
            lock.modify_index
        );
        delete_bool(&self.client, &target).map_err(|e| format!("failed to remove semaphore: {e}"))
    }
}

/// The semaphore state stored in `PREFIX/.lock`.
struct SemaphoreState {
    limit: i64,
    holders: BTreeMap<String, bool>,
}

/// Starts the child as Consul's lock command does.
fn start_child(args: &[String], pass_stdin: bool, shell: bool) -> std::io::Result<Child> {
    let mut command = if shell {
        let shell_path = std::env::var("SHELL")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/bin/sh".to_string());
        let mut c = Command::new(shell_path);
        c.arg("-c").arg(args.join(" "));
        c
    } else {
        let mut c = Command::new(&args[0]);
        c.args(&args[1..]);
        c
    };
    command
        .env("CONSUL_LOCK_HELD", "true")
        .stdin(if pass_stdin {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
}

/// SIGTERM, then SIGKILL after the grace period; reaps the child.
fn kill_child(child: &mut Child, verbose: bool) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    if verbose {
        eprintln!("Terminating child pid {}", child.id());
    }
    // SAFETY: signalling our own unreaped child by PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(SUPERVISE_TICK);
    }
    if verbose {
        eprintln!("Killing child pid {}", child.id());
    }
    let _ = child.kill();
    child.wait().ok()
}

/// Why the supervising loop stopped.
enum Ending {
    ChildExited(ExitStatus),
    LockLost,
    Shutdown,
}

fn supervise(child: &mut Child, lost: &Receiver<()>) -> Ending {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Ending::ChildExited(status);
        }
        if shutdown_requested() {
            return Ending::Shutdown;
        }
        match lost.recv_timeout(SUPERVISE_TICK) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return Ending::LockLost,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Checks the arguments in Consul's order; returns the key prefix without its leading `/`.
fn validated_prefix(args: &LockArgs) -> Result<String, String> {
    if args.limit <= 0 {
        return Err("Lock holder limit must be positive".to_string());
    }
    if args.limit > SEMAPHORE_LIMIT_MAX {
        return Err(format!(
            "Lock holder limit must be at most {SEMAPHORE_LIMIT_MAX}"
        ));
    }
    let (Some(prefix), false) = (&args.prefix, args.child.is_empty()) else {
        return Err("Key prefix and child command must be specified".to_string());
    };
    let prefix = prefix.trim_start_matches('/').to_string();
    if args.monitor_retry < 0 {
        return Err("Number for 'monitor-retry' must be >= 0".to_string());
    }
    Ok(prefix)
}

/// Runs the child command while the lock is held, until it exits, the lock is lost or a
/// shutdown is asked for (the child then gets the signal and is killed). Returns the child's
/// exit code as the lock command reports it: 0, or 2 when it failed or could not start.
fn run_handler(holder: &Holder, args: &LockArgs, lost: &Receiver<()>) -> i32 {
    holder.info("Starting handler");
    let mut child = match start_child(&args.child, args.pass_stdin, args.shell) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("Error starting handler: {e}");
            return 2;
        }
    };
    let mut child_code = 0;
    match supervise(&mut child, lost) {
        Ending::ChildExited(status) => {
            if !status.success() {
                eprintln!("Error running handler: {status}");
                child_code = 2;
            }
            holder.info("Child terminated, releasing lock");
        }
        Ending::LockLost => {
            holder.info("Lock lost, killing child");
            kill_child(&mut child, args.verbose);
        }
        Ending::Shutdown => {
            holder.info("Shutdown triggered, killing child");
            let signal = LAST_SIGNAL.load(Ordering::SeqCst);
            if signal != 0 {
                // SAFETY: forwarding the signal we received to our own child.
                unsafe { libc::kill(child.id() as i32, signal) };
            }
            kill_child(&mut child, args.verbose);
        }
    }
    child_code
}

pub fn run(args: LockArgs) -> Result<i32, String> {
    let prefix = validated_prefix(&args)?;
    let timeout = args.timeout.or(args.try_timeout).filter(|d| !d.is_zero());
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("Consul lock for '{}' at '{}'", args.child.join(" "), prefix));
    let client = args.http.client()?;
    let options = client.options.clone();
    client
        .ok("GET", "/v1/agent/self", None)
        .map_err(|e| format!("Error querying Consul agent: {e}"))?;
    install_shutdown_handlers();
    let verbose = args.verbose;
    if verbose {
        if args.limit == 1 {
            eprintln!(
                "Setting up lock at path: {}",
                join_key(&prefix, LOCK_KEY_NAME)
            );
        } else {
            eprintln!(
                "Setting up semaphore (limit {}) at prefix: {prefix}",
                args.limit
            );
        }
        eprintln!("Attempting lock acquisition");
    }
    let session = create_session(&client, &name, args.limit > 1)
        .map_err(|e| format!("Lock acquisition failed: {e}"))?;
    let renew_stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (options, session, stop) = (options.clone(), session.clone(), renew_stop.clone());
        std::thread::spawn(move || renew_periodically(options, session, stop))
    };
    let stop_session = |renewer: std::thread::JoinHandle<()>| {
        renew_stop.store(true, Ordering::SeqCst);
        let _ = renewer.join();
    };
    let holder = Holder {
        client,
        options,
        prefix,
        limit: args.limit,
        session,
        verbose,
    };
    match holder.acquire(timeout) {
        Ok(true) => {}
        Ok(false) => {
            stop_session(renewer);
            return Err("Shutdown triggered or timeout during lock acquisition".to_string());
        }
        Err(e) => {
            stop_session(renewer);
            return Err(format!("Lock acquisition failed: {e}"));
        }
    }
    let (lost_tx, lost_rx) = mpsc::channel();
    holder.monitor(args.monitor_retry as u32, lost_tx);
    let child_code = if shutdown_requested() {
        eprintln!("Shutdown triggered during lock acquisition");
        0
    } else {
        run_handler(&holder, &args, &lost_rx)
    };
    let released = holder.release();
    stop_session(renewer);
    released.map_err(|e| format!("Lock release failed: {e}"))?;
    match holder.cleanup() {
        Ok(true) => holder.info("Cleanup succeeded"),
        Ok(false) => holder.info("Cleanup aborted, lock in use"),
        Err(e) => return Err(format!("Lock cleanup failed: {e}")),
    }
    Ok(if args.child_exit_code { child_code } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_join_like_go_path_join() {
        assert_eq!(join_key("svc/leader", ".lock"), "svc/leader/.lock");
        assert_eq!(join_key("svc/leader/", ".lock"), "svc/leader/.lock");
        assert_eq!(join_key("", ".lock"), ".lock");
    }

    #[test]
    fn flag_values_match_consuls_api() {
        assert_eq!(LOCK_FLAG_VALUE, 3_304_740_253_564_472_344);
        assert_eq!(SEMAPHORE_FLAG_VALUE, 16_210_313_421_097_356_768);
    }
}
