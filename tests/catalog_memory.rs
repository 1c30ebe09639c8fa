//! Memory per registered service instance, the figure the issue #4 benchmark watches
//! (`loadgen register --via catalog --per-node 100` against a `-dev` agent, ≤ 1 KiB of RSS
//! per instance with one check each). This test counts the heap bytes the catalog keeps per
//! instance — allocator-independent, so it guards the row layouts, the views and the maps
//! against growing back; the agent's RSS adds the allocator's size classes (about 8%) and
//! the trailing Raft log (about 30 B per instance) on top.

use praetor::store::catalog::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
use praetor::store::{CatalogResult, Command, CommandResult, Tables};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts live heap bytes and allocations (as requested, before any allocator rounding).
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);
/// Live allocations by requested size (the last slot counts every larger size).
static BY_SIZE: [AtomicIsize; 4097] = [const { AtomicIsize::new(0) }; 4097];

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        LIVE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BY_SIZE[layout.size().min(4096)].fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        LIVE_ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
        BY_SIZE[layout.size().min(4096)].fetch_sub(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Instances registered; enough for the maps' node sizes to settle to their average.
const INSTANCES: usize = 5_000;
/// Instances per catalog node, as the benchmark registers them.
const INSTANCES_PER_NODE: usize = 100;
/// Heap bytes the catalog may keep per instance with one check. It keeps about 424 now
/// (about 800 before rows used one-word strings and views shrank to five words, about 560
/// before instance and check rows dropped `Arc`'s weak count and views their fifth word,
/// 510 before the per-instance indexes left `imbl`'s half-full nodes for `PackedMap`).
const BYTES_PER_INSTANCE_MAX: isize = 450;
/// Allocations per instance: the instance and check rows, their distinct strings (ID,
/// address, check ID, check name), the view's check list, and a share of map nodes.
const ALLOCATIONS_PER_INSTANCE_MAX: f64 = 8.0;
/// Node-only registrations before the measured ones (see their use).
const FILLER_NODES: usize = 65;

/// The body loadgen sends for instance `i`, as the HTTP layer decodes it.
fn registration(i: usize) -> Command {
    let address = |n: usize| {
        let n = n as u32 + 1;
        format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
    };
    let node = format!("rss-node-{}", i / INSTANCES_PER_NODE);
    let id = format!("rss-{i}");
    Command::Catalog(CatalogOp::Register(Box::new(Registration {
        node: node.clone(),
        address: address(i / INSTANCES_PER_NODE),
        datacenter: "dc1".into(),
        service: Some(ServiceRegistration {
            id: id.clone(),
            name: "rss".into(),
            address: address(i),
            port: 8080,
            ..Default::default()
        }),
        checks: vec![CheckRegistration {
            node,
            check_id: format!("service:{id}"),
            name: format!("{id} check"),
            status: "passing".into(),
            service_id: id,
            definition: Some(Default::default()),
            ..Default::default()
        }],
        ..Default::default()
    })))
}

#[test]
fn catalog_keeps_little_per_registered_instance() {
    let commands: Vec<Command> = (0..INSTANCES).map(registration).collect();
    let mut tables = Tables::default();
    let mut changes = Vec::new();
    // Debug builds check the catalog's invariants after every write to a small catalog
    // (O(rows) each); a few empty nodes first make it large enough to skip that.
    let mut index = 0;
    for filler in 0..FILLER_NODES {
        index += 1;
        let node = Registration {
            node: format!("filler-{filler}"),
            address: "10.255.0.1".into(),
            ..Default::default()
        };
        let command = Command::Catalog(CatalogOp::Register(Box::new(node)));
        assert_eq!(
            tables.apply(index, &command, &mut changes),
            CommandResult::Catalog(CatalogResult::Written)
        );
    }
    let bytes_before = LIVE_BYTES.load(Ordering::Relaxed);
    let allocations_before = LIVE_ALLOCATIONS.load(Ordering::Relaxed);
    for command in &commands {
        changes.clear();
        index += 1;
        let result = tables.apply(index, command, &mut changes);
        assert_eq!(result, CommandResult::Catalog(CatalogResult::Written));
    }
    changes = Vec::new();
    drop(changes);
    let bytes = LIVE_BYTES.load(Ordering::Relaxed) - bytes_before;
    let allocations = LIVE_ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
    let per_instance = bytes / INSTANCES as isize;
    let allocations_per_instance = allocations as f64 / INSTANCES as f64;
    eprintln!(
        "catalog: {per_instance} B and {allocations_per_instance:.2} allocations per instance"
    );
    assert_eq!(
        tables.catalog.group("rss").map(|g| g.instances.len()),
        Some(INSTANCES)
    );
    assert!(
        per_instance <= BYTES_PER_INSTANCE_MAX,
        "{per_instance} B per instance, budget {BYTES_PER_INSTANCE_MAX}"
    );
    assert!(
        allocations_per_instance <= ALLOCATIONS_PER_INSTANCE_MAX,
        "{allocations_per_instance} allocations per instance"
    );
    breakdown(tables);
}

fn histogram() -> Vec<isize> {
    BY_SIZE.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

/// Prints what each part of the catalog keeps per instance, by freeing the parts one by
/// one: the services' instance maps (the views), the nodes' check maps (with the check
/// rows), the nodes' service maps (with the instance rows).
fn breakdown(mut tables: Tables) {
    let mut stage = |name: &str, free: &mut dyn FnMut(&mut Tables)| {
        let bytes = LIVE_BYTES.load(Ordering::Relaxed);
        let sizes = histogram();
        free(&mut tables);
        let freed = bytes - LIVE_BYTES.load(Ordering::Relaxed);
        let mut by_size: Vec<(usize, isize)> = sizes
            .iter()
            .zip(histogram())
            .enumerate()
            .map(|(size, (before, after))| (size, before - after))
            .filter(|(_, n)| *n != 0)
            .collect();
        by_size.sort_by_key(|(size, n)| -(*size as isize) * n);
        let shown: Vec<String> = by_size
            .iter()
            .take(8)
            .map(|(size, n)| format!("{n}×{size}B"))
            .collect();
        eprintln!(
            "  {name}: {} B per instance ({})",
            freed / INSTANCES as isize,
            shown.join(", ")
        );
    };
    eprintln!("breakdown:");
    stage("views (services' instance maps)", &mut |t| {
        let names: Vec<_> = t.catalog.services.keys().cloned().collect();
        for name in names {
            t.catalog.services.get_mut(&name).unwrap().instances = Default::default();
        }
    });
    stage("check maps and check rows", &mut |t| {
        let nodes: Vec<_> = t.catalog.nodes.keys().cloned().collect();
        for node in nodes {
            t.catalog.nodes.get_mut(&node).unwrap().checks = Default::default();
        }
    });
    stage("service maps and instance rows", &mut |t| {
        let nodes: Vec<_> = t.catalog.nodes.keys().cloned().collect();
        for node in nodes {
            t.catalog.nodes.get_mut(&node).unwrap().services = Default::default();
        }
    });
    stage("the rest", &mut |t| *t = Tables::default());
}
