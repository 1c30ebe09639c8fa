//! Writes a `/v1/snapshot` archive holding `KEYS` KV entries of `VALUE_BYTES` each, for the
//! recovery benchmarks (restore it with `praetor snapshot restore FILE`).
//!
//! `cargo run --release --example make_snapshot -- KEYS VALUE_BYTES OUT`

use bytes::Bytes;
use praetor::proto::snapshot_archive::write_archive;
use praetor::store::kv::KvOp;
use praetor::store::{Command, Tables};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: make_snapshot KEYS VALUE_BYTES OUT");
        std::process::exit(2);
    }
    let keys: u64 = args[1].parse().expect("KEYS is a number");
    let value_bytes: usize = args[2].parse().expect("VALUE_BYTES is a number");
    let value = Bytes::from(vec![b'v'; value_bytes]);
    let mut tables = Tables::default();
    let mut changes = Vec::new();
    for i in 0..keys {
        let op = KvOp::Set {
            key: format!("bench/{i:08}"),
            value: value.clone(),
            flags: 0,
        };
        tables.apply(i + 1, &Command::Kv(op), &mut changes);
        changes.clear();
    }
    let state = tables.to_snapshot_bytes();
    let meta = serde_json::json!({"Version": 1, "ID": "bench", "Index": tables.index, "Term": 1, "Size": state.len()});
    let archive = write_archive(&serde_json::to_vec(&meta).unwrap(), &state, 0);
    std::fs::write(&args[3], &archive).expect("writing the archive");
    eprintln!(
        "{} keys, state {} bytes, archive {} bytes -> {}",
        keys,
        state.len(),
        archive.len(),
        args[3]
    );
}
