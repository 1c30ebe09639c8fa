//! loadgen: drives Consul-compatible HTTP, etcd and DNS targets. Filled in by the loadgen issue.
fn main() {
    eprintln!("loadgen: no scenarios yet");
    std::process::exit(2);
}
