//! What one catalog write costs against one KV write, in the work every server repeats
//! (issue #24, registration churn; `bench/compare.py` row `churn-catalog-vs-kv-put`).
//!
//! The store holds a realistic population: 1,000 nodes with a passing `serfHealth` check
//! each and 10 service instances each (`svc-0` … `svc-9`, so every service has 1,000
//! instances), each instance with one passing service check; and 1,000 KV keys. One
//! operation is what loadgen's `catalog-churn --via catalog` sends (node + service + one
//! check, `loadgen/src/workloads.rs::registration`, on a node that stays registered), its
//! deregistration (`{"Node":…,"ServiceID":…}`), or a KV set of a 16-byte value — one that
//! changes the key (two values alternate) and one that writes the value the key already
//! holds, which Consul's semantics make a no-op in the store: that is what the figure's
//! KV PUT baseline sends (loadgen `kv-put` repeats one value on one key):
//!
//! - `leader/*`: the leader's shard turning the request body into Raft bytes (JSON decode
//!   and validation, command encode);
//! - `apply/*`: what every server's raft thread does with those bytes: decode the command
//!   (`Command::decode_borrowed`, as `replica::state` does),
//!   take a writable copy of the store while the shards still read the published version
//!   (`Arc::make_mut`, as `replica::state` does for each batch — here one entry per batch),
//!   apply it, and publish the new version, dropping the version before it.
//!
//! Run: `cargo bench --bench catalog_apply` (criterion; timings need a quiet machine), or
//! count instructions per operation under callgrind, which a loaded machine does not
//! disturb: `catalog_apply --callgrind <op> <iterations>` runs only `<op>` (`register`,
//! `deregister`, `kv-set`, `kv-set-same`, `leader-register`, `leader-register-strict-check`, `leader-deregister`,
//! `leader-kv-set`) that
//! many times inside `cg_measured`, so
//!
//! ```sh
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*cg_measured*' \
//!     --callgrind-out-file=/dev/null target/bench/deps/catalog_apply-* --callgrind register 2000
//! ```
//!
//! reports the instructions of 2,000 operations (docs/benchmarks.md, issue #24, gives the
//! build and the figures), and prints the allocator calls each operation made.
//! `catalog_apply --allocs <iterations>` prints the allocator calls per operation of every
//! operation, without valgrind: the bench's global allocator is mimalloc behind two
//! counters.

use bytes::Bytes;
use criterion::{black_box, Criterion};
use praetor::consul::registration::parse_registration;
use praetor::store::catalog::CatalogOp;
use praetor::store::kv::KvOp;
use praetor::store::{Change, Command, CommandResult, Tables};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The agent's allocator (`src/main.rs`), counting its calls: on a busy server each
/// allocation of an apply tends to miss the cache (blocks freed by other threads, or by the
/// store version just dropped), so how many there are matters more than their instructions.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

struct CountingAlloc;

/// Calls of `alloc`/`alloc_zeroed` and of `realloc` since the start (every thread).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static REALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on unchanged to mimalloc, which upholds `GlobalAlloc`'s
// contract; the counters are only incremented.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        mimalloc::MiMalloc.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        mimalloc::MiMalloc.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        mimalloc::MiMalloc.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCATIONS.fetch_add(1, Relaxed);
        mimalloc::MiMalloc.realloc(ptr, layout, new_size)
    }
}

/// Allocations and reallocations made inside [`cg_measured`] so far.
static MEASURED_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static MEASURED_REALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Operations run inside [`cg_measured`] so far.
static MEASURED_OPERATIONS: AtomicU64 = AtomicU64::new(0);

const NODES: usize = 1_000;
const INSTANCES_PER_NODE: usize = 10;
const KV_KEYS: usize = 1_000;
/// The node and service the churn registers and deregisters, as loadgen's first connection
/// names them (its service joins `svc-0`'s 1,000 instances).
const CHURN_NODE: &str = "loadgen-churn-0";
const CHURN_SERVICE_ID: &str = "svc-0-churn-0";
const CHURN_SERVICE: &str = "svc-0";
const KV_KEY: &str = "bench/put";
const KV_VALUE: &[u8; 16] = b"0123456789abcdef";
const KV_OTHER_VALUE: &[u8; 16] = b"fedcba9876543210";

/// The body loadgen's `catalog-churn --via catalog` registers with (same fields, same order).
fn register_body() -> String {
    format!(
        r#"{{"Node":"{CHURN_NODE}","Address":"10.0.0.1","Service":{{"ID":"{CHURN_SERVICE_ID}","Service":"{CHURN_SERVICE}","Address":"10.0.0.2","Port":8080}},"Check":{{"Node":"{CHURN_NODE}","CheckID":"service:{CHURN_SERVICE_ID}","Name":"{CHURN_SERVICE_ID} check","Status":"passing","ServiceID":"{CHURN_SERVICE_ID}"}}}}"#
    )
}

/// The leader's work for a registration: JSON body to Raft bytes.
fn leader_register(body: &[u8]) -> Vec<u8> {
    let registration = parse_registration(body, "dc1").expect("the churn body is valid");
    Command::Catalog(CatalogOp::Register(Box::new(registration))).encode()
}

/// The leader's work for a deregistration: the handler reads three strings from a small
/// JSON body (`api::catalog::deregister`), then encodes.
fn leader_deregister(body: &[u8]) -> Vec<u8> {
    let value = praetor::consul::body::parse_json(body).expect("valid body");
    let obj = praetor::consul::body::Obj::new(&value).expect("an object");
    Command::Catalog(CatalogOp::Deregister {
        node: obj.string(&["node"]).expect("a string"),
        service_id: obj.string(&["serviceid"]).expect("a string"),
        check_id: obj.string(&["checkid"]).expect("a string"),
    })
    .encode()
}

/// The leader's work for a KV PUT: the body becomes the value.
fn leader_kv_set(value: &[u8]) -> Vec<u8> {
    Command::Kv(KvOp::Set {
        key: KV_KEY.to_string(),
        value: Bytes::copy_from_slice(value),
        flags: 0,
    })
    .encode()
}

/// A store version as the raft thread holds it, with the version the shards read.
struct Store {
    current: Arc<Tables>,
    published: Arc<Tables>,
    changes: Vec<Change>,
}

impl Store {
    fn populated() -> Store {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let mut index = 0u64;
        let mut apply = |tables: &mut Tables, command: Command| {
            index += 1;
            let result = tables.apply(index, &command, &mut changes);
            assert_eq!(result, CommandResult::Bool(true), "{command:?}");
            changes.clear();
        };
        for n in 0..NODES {
            let node = format!("node-{n}");
            let address = format!("10.{}.{}.1", n / 250, n % 250);
            let node_check = format!(
                r#"{{"Node":"{node}","Address":"{address}","Check":{{"CheckID":"serfHealth","Name":"Serf Health Status","Status":"passing"}}}}"#
            );
            let reg = parse_registration(node_check.as_bytes(), "dc1").unwrap();
            apply(
                &mut tables,
                Command::Catalog(CatalogOp::Register(Box::new(reg))),
            );
            for s in 0..INSTANCES_PER_NODE {
                let id = format!("svc-{s}-{n}");
                let body = format!(
                    r#"{{"Node":"{node}","Address":"{address}","Service":{{"ID":"{id}","Service":"svc-{s}","Tags":["v1"],"Port":{}}},"Check":{{"CheckID":"service:{id}","Name":"svc-{s} check","Status":"passing","ServiceID":"{id}","Output":"HTTP GET http://{address}:{}/health: 200 OK"}}}}"#,
                    8000 + s,
                    8000 + s
                );
                let reg = parse_registration(body.as_bytes(), "dc1").unwrap();
                apply(
                    &mut tables,
                    Command::Catalog(CatalogOp::Register(Box::new(reg))),
                );
            }
        }
        for k in 0..KV_KEYS {
            apply(
                &mut tables,
                Command::Kv(KvOp::Set {
                    key: format!("app/config/{k:04}"),
                    value: Bytes::from_static(KV_VALUE),
                    flags: 0,
                }),
            );
        }
        // The churn's node exists from its first registration on; deregistrations remove
        // only the service.
        let register = leader_register(register_body().as_bytes());
        for entry in [register, leader_deregister(deregister_body())] {
            apply(&mut tables, Command::decode(&entry).unwrap());
        }
        assert_eq!(
            tables
                .catalog
                .group(CHURN_SERVICE)
                .map(|g| g.instances.len()),
            Some(NODES)
        );
        let current = Arc::new(tables);
        Store {
            published: current.clone(),
            current,
            changes: Vec::new(),
        }
    }

    /// One committed entry, as every server's raft thread applies it.
    fn apply(&mut self, entry: &[u8]) {
        let command = Command::decode_borrowed(entry).expect("the bench's entries decode");
        let tables = Arc::make_mut(&mut self.current);
        let index = tables.index + 1;
        let result = tables.apply(index, &command, &mut self.changes);
        debug_assert_eq!(result, CommandResult::Bool(true));
        black_box(&result);
        // The shards take the new version and drop the one before.
        self.published = self.current.clone();
        self.changes.clear();
    }
}

fn deregister_body() -> &'static [u8] {
    br#"{"Node":"loadgen-churn-0","ServiceID":"svc-0-churn-0"}"#
}

/// The instructions callgrind counts are those of this function only
/// (`--toggle-collect='*cg_measured*'`); the allocations counted are those made here too
/// (reading the counters costs a handful of instructions per call).
#[inline(never)]
fn cg_measured(iterations: usize, op: &mut dyn FnMut()) {
    let allocations = ALLOCATIONS.load(Relaxed);
    let reallocations = REALLOCATIONS.load(Relaxed);
    for _ in 0..iterations {
        op();
    }
    MEASURED_ALLOCATIONS.fetch_add(ALLOCATIONS.load(Relaxed) - allocations, Relaxed);
    MEASURED_REALLOCATIONS.fetch_add(REALLOCATIONS.load(Relaxed) - reallocations, Relaxed);
    MEASURED_OPERATIONS.fetch_add(iterations as u64, Relaxed);
}

/// Every operation `--callgrind` and `--allocs` know, in the order `--allocs` reports them.
const OPERATIONS: [&str; 8] = [
    "register",
    "deregister",
    "kv-set",
    "kv-set-same",
    "leader-register",
    "leader-register-strict-check",
    "leader-deregister",
    "leader-kv-set",
];

/// `--allocs <iterations>`: allocator calls per operation for every operation (no
/// valgrind needed; the counts do not depend on the machine's load).
fn allocations(iterations: usize) {
    println!("operation           allocations/op  reallocations/op");
    for op in OPERATIONS {
        let before = (
            MEASURED_ALLOCATIONS.load(Relaxed),
            MEASURED_REALLOCATIONS.load(Relaxed),
            MEASURED_OPERATIONS.load(Relaxed),
        );
        run(op, iterations);
        let operations = (MEASURED_OPERATIONS.load(Relaxed) - before.2) as f64;
        let per_op = |now: u64, then: u64| (now - then) as f64 / operations;
        println!(
            "{op:<20}{:>14.2}{:>18.2}",
            per_op(MEASURED_ALLOCATIONS.load(Relaxed), before.0),
            per_op(MEASURED_REALLOCATIONS.load(Relaxed), before.1),
        );
    }
}

/// `--callgrind <op> <iterations>`: runs `op`, then says how many allocator calls each
/// operation made (on stderr, next to valgrind's own output).
fn callgrind(op: &str, iterations: usize) {
    run(op, iterations);
    let operations = MEASURED_OPERATIONS.load(Relaxed) as f64;
    eprintln!(
        "{op}: {:.2} allocations and {:.2} reallocations per operation",
        MEASURED_ALLOCATIONS.load(Relaxed) as f64 / operations,
        MEASURED_REALLOCATIONS.load(Relaxed) as f64 / operations,
    );
}

/// Runs `op` `iterations` times, each inside [`cg_measured`] with its setup outside.
fn run(op: &str, iterations: usize) {
    let register = leader_register(register_body().as_bytes());
    let deregister = leader_deregister(deregister_body());
    let kv = [leader_kv_set(KV_VALUE), leader_kv_set(KV_OTHER_VALUE)];
    let reg_body = register_body();
    let mut store = Store::populated();
    store.apply(&kv[0]);
    match op {
        // Registering twice in a row would be an identical re-registration (no write), so
        // each registration is undone outside the measured function, and the reverse.
        "register" => {
            for _ in 0..iterations {
                cg_measured(1, &mut || store.apply(&register));
                store.apply(&deregister);
            }
        }
        "deregister" => {
            for _ in 0..iterations {
                store.apply(&register);
                cg_measured(1, &mut || store.apply(&deregister));
            }
        }
        "kv-set" => {
            let mut n = 0;
            cg_measured(iterations, &mut || {
                n += 1;
                store.apply(&kv[n % 2]);
            })
        }
        "kv-set-same" => cg_measured(iterations, &mut || store.apply(&kv[0])),
        "leader-register" => cg_measured(iterations, &mut || {
            black_box(leader_register(black_box(reg_body.as_bytes())));
        }),
        // The strict check alone (Consul's unknown-field refusal, issue #35) on the parsed
        // churn body: its share of `leader-register`, which includes it.
        "leader-register-strict-check" => {
            let parsed = praetor::consul::body::parse_json(reg_body.as_bytes()).unwrap();
            cg_measured(iterations, &mut || {
                black_box(praetor::consul::body::check_strict(
                    black_box(&parsed),
                    praetor::consul::body::Kind::Obj(&praetor::consul::bodies::REGISTER_REQUEST),
                ))
                .unwrap();
            })
        }
        "leader-deregister" => cg_measured(iterations, &mut || {
            black_box(leader_deregister(black_box(deregister_body())));
        }),
        "leader-kv-set" => cg_measured(iterations, &mut || {
            black_box(leader_kv_set(black_box(KV_VALUE)));
        }),
        other => panic!("unknown operation {other:?}"),
    }
}

fn criterion_benches(c: &mut Criterion) {
    let register = leader_register(register_body().as_bytes());
    let deregister = leader_deregister(deregister_body());
    let kv = [leader_kv_set(KV_VALUE), leader_kv_set(KV_OTHER_VALUE)];
    let reg_body = register_body();
    let mut store = Store::populated();
    c.bench_function("apply/register+deregister", |b| {
        b.iter(|| {
            store.apply(&register);
            store.apply(&deregister);
        })
    });
    c.bench_function("apply/kv-set+kv-set", |b| {
        b.iter(|| {
            store.apply(&kv[1]);
            store.apply(&kv[0]);
        })
    });
    c.bench_function("apply/kv-set-same", |b| b.iter(|| store.apply(&kv[0])));
    c.bench_function("leader/register", |b| {
        b.iter(|| leader_register(black_box(reg_body.as_bytes())))
    });
    c.bench_function("leader/deregister", |b| {
        b.iter(|| leader_deregister(black_box(deregister_body())))
    });
    c.bench_function("leader/kv-set", |b| {
        b.iter(|| leader_kv_set(black_box(KV_VALUE)))
    });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--callgrind") {
        let op = args.get(at + 1).expect("--callgrind <op> <iterations>");
        let iterations = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .expect("--callgrind <op> <iterations>");
        callgrind(op, iterations);
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--allocs") {
        let iterations = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .expect("--allocs <iterations>");
        allocations(iterations);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    criterion_benches(&mut criterion);
    criterion.final_summary();
}
