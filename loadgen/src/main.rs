//! loadgen: a thread-per-core load generator for praetor and its reference systems.
//!
//! `loadgen <scenario> --target URL …` runs one scenario; `loadgen compare …` runs two targets
//! interleaved and prints ratios; `loadgen chart …` draws a result as a PNG. See
//! `loadgen --help` and docs/benchmarks.md.

mod chart;
mod cli;
mod compare;
mod dnsrun;
mod dnswire;
mod engine;
mod fanout;
mod fanout_floor;
mod hist;
mod http;
mod httprun;
mod net;
mod report;
mod run;
mod setup;
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
        Command::Run(config) => run::run_scenario(&config).and_then(|r| report::emit(&r)),
        Command::Compare(config) => compare::run_compare(&config),
        Command::Chart(config) => chart::draw(&config),
        Command::FanoutFloor(config) => fanout_floor::serve(&config),
    };
    if let Err(e) = outcome {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}
