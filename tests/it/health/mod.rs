//! Health: checks of every kind, their states, and blocking health reads.

mod compat_checks;
mod health_blocking;
mod health_checks;
