//! The `praetor` binary: parses the command line and hands off to [`praetor::cli`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(praetor::cli::main());
}
