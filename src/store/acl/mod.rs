//! ACL state and policy evaluation (work in progress).

pub mod authorizer;
pub mod builtin;
pub mod rules;
