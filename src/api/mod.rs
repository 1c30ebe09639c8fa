//! api (filled in by the issue that needs it).
