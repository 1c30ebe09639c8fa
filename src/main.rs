//! The `praetor` binary: parses the command line and hands off to [`praetor::cli`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // mimalloc asks for transparent huge pages on its arenas; the kernel then backs any
    // touched 2 MiB stretch with a whole huge page, which costs 15-20 MB of RSS on a
    // loaded server and keeps freed memory resident (docs/memory.md). Turned off for the
    // process before much is allocated, unless mimalloc's own switch says otherwise.
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a prctl with plain integer arguments; it only sets a flag on the process.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
    std::process::exit(praetor::cli::main());
}
