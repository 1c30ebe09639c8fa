//! loadgen: a thread-per-core load generator for praetor and its reference systems.
//!
//! `loadgen <scenario> --target URL …` runs one scenario; `loadgen compare …` runs two targets
//! interleaved and prints ratios; `loadgen chart …` draws a result as a PNG. See
//! `loadgen --help` and docs/benchmarks.md.

mod chart;
mod cli;
mod compare;
mod config;
mod dnsrun;
mod dnswire;
mod engine;
mod fanout;
mod fanout_floor;
mod floor;
mod hist;
mod http;
mod httprun;
mod net;
mod report;
mod run;
mod setup;
mod tcprun;
mod workloads;

use cli::Command;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match cli::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(2);
        }
    };
    let outcome = match command {
        Command::Help(topic) => {
            print!("{}", cli::help(&topic));
            Ok(())
        }
        Command::Run(config) => apply_sched_policy(config.sched_policy)
            .and_then(|()| run::run_scenario(&config))
            .and_then(|r| report::emit(&r)),
        Command::Compare(config) => {
            apply_sched_policy(config.a.sched_policy).and_then(|()| compare::run_compare(&config))
        }
        Command::Chart(config) => chart::draw(&config),
        Command::FanoutFloor(config) => fanout_floor::serve(&config),
        Command::Floor(config) => floor::serve(&config),
        Command::TcpEcho(listen) => tcprun::serve_echo(listen),
    };
    if let Err(e) = outcome {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}

/// Puts the calling thread under `policy`; threads started afterwards inherit it, so this
/// runs before any worker exists.
fn apply_sched_policy(policy: config::SchedPolicy) -> Result<(), String> {
    let raw_policy = match policy {
        config::SchedPolicy::Normal => return Ok(()),
        config::SchedPolicy::Batch => libc::SCHED_BATCH,
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread with a valid parameter struct.
    let result = unsafe { libc::sched_setscheduler(0, raw_policy, &param) };
    if result != 0 {
        return Err(format!(
            "cannot set scheduling policy: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
