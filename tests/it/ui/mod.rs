//! The web UI: served over HTTP, and driven in real Chromium.

mod ui_browser;
mod ui_http;
