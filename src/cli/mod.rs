//! Operator commands and the `praetor` command line. Every command exits non-zero with one
//! readable line on error.

/// Entry point used by `main`; returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("version") => {
            println!("Consul v{}", crate::CONSUL_API_VERSION);
            println!("praetor v{}", crate::PRAETOR_VERSION);
            0
        }
        _ => {
            eprintln!("usage: praetor <command> [args]");
            1
        }
    }
}
