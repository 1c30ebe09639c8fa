//! dns (filled in by the issue that needs it).
