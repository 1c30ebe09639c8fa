//! TLS for the agent's listeners and dialers (placeholder; filled in below).
pub mod files;
pub mod verify;
