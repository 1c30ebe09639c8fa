//! gossip (filled in by the issue that needs it).
