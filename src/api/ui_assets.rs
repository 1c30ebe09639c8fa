//! The web UI's files, served under `ui_config.content_path` (Consul's `/ui/`), and what `/`
//! answers.
//!
//! The files are the repository's `ui/` directory, embedded in the binary at build time, or
//! — with `ui_config.dir` / `-ui-dir` — a directory read once at startup. Either way they
//! become one immutable [`UiSite`], prepared when the agent starts:
//! - `index.html` is rendered once with the agent's settings: `{{SETTINGS}}` becomes a JSON
//!   object (content path, datacenter, ACLs on or off, metrics provider, dashboard link
//!   templates) that the page reads from its `<meta name="praetor-ui/settings">` tag, and
//!   `{{CONTENT_PATH}}` and `{{ASSETS}}` the prefixes its links use;
//! - every asset is also served under `assets/<fingerprint>/`, where the fingerprint is a
//!   hash of the whole file set, so those answers may be cached for a year (`immutable`) and
//!   a new build is fetched under new URLs; index.html and unfingerprinted paths are
//!   answered `no-cache` with an `ETag`, so a browser revalidates them and gets a bodiless
//!   `304 Not Modified` when nothing changed;
//! - text files are gzip-compressed once (best compression, fixed header, so the bytes are
//!   reproducible) and sent compressed to clients that accept gzip.
//!
//! Any other path under the content path answers index.html, so deep links
//! (`/ui/dc1/services/web/instances`) load the single-page app, which routes on the path.
//! Paths under `assets/` never fall back: a missing script is a 404, not HTML.
//!
//! Invariant: one agent per process, and its UI configuration is fixed at start (Consul does
//! not reload `ui_config.enabled`, `dir` or `content_path` either), so the site lives in a
//! process-wide cell that [`install`] fills before any listener opens.

use super::{ApiError, Context, Outcome, Reply, Request};
use crate::config::AgentConfig;
use crate::proto::http::Method;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

/// Most files read from `ui_config.dir`.
pub const UI_DIR_FILES_MAX: usize = 4096;
/// Most bytes read from `ui_config.dir`, all files together.
pub const UI_DIR_BYTES_MAX: u64 = 64 << 20;
/// Deepest directory nesting followed below `ui_config.dir`.
pub const UI_DIR_DEPTH_MAX: usize = 16;
/// Files smaller than this are not worth compressing.
const GZIP_FILE_BYTES_MIN: usize = 256;
/// Hex digits of the fingerprint in asset URLs (48 bits: a collision between two builds
/// someone has cached is not a practical concern).
pub const FINGERPRINT_HEX_DIGITS: usize = 12;
/// Hex digits of a file's hash in its `ETag`.
const ETAG_HEX_DIGITS: usize = 16;
/// Cache rule of fingerprinted assets: their content never changes under that URL.
const CACHE_IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Cache rule of index.html and unfingerprinted paths: revalidate every time.
const CACHE_REVALIDATE: &str = "no-cache";
/// What `/` says when no UI is served (Consul's text).
pub const UI_DISABLED_TEXT: &str = "Consul Agent: UI disabled. To enable, set ui_config.enabled=true in the agent configuration and restart.";
/// The embedded page allows scripts, styles and requests to its own origin only: its
/// settings travel in a meta tag, never in an inline script.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

macro_rules! embedded_files {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $path)) as &[u8])),*]
    };
}

/// Every file of `ui/`, as built into the binary. A test checks that this list and the
/// directory agree.
pub const EMBEDDED_FILES: &[(&str, &[u8])] = embedded_files![
    "index.html",
    "robots.txt",
    "assets/favicon.svg",
    "assets/style.css",
    "assets/access.js",
    "assets/app.js",
    "assets/alerts.js",
    "assets/api.js",
    "assets/auth.js",
    "assets/dom.js",
    "assets/health.js",
    "assets/live.js",
    "assets/router.js",
    "assets/settings.js",
    "assets/views/acl.js",
    "assets/views/config.js",
    "assets/views/intentions.js",
    "assets/views/kv.js",
    "assets/views/login.js",
    "assets/views/node.js",
    "assets/views/nodes.js",
    "assets/views/service.js",
    "assets/views/services.js",
];

/// A file of the UI before it is prepared: its path below the site's root and its bytes.
type RawFile = (String, Cow<'static, [u8]>);

/// One file ready to send, in both codings.
#[derive(Debug)]
pub struct UiFile {
    content_type: &'static str,
    body: Cow<'static, [u8]>,
    gzip: Option<Vec<u8>>,
    etag: String,
    etag_gzip: String,
}

impl UiFile {
    fn new(path: &str, body: Cow<'static, [u8]>) -> UiFile {
        let content_type = content_type_of(path);
        let hash = hex_prefix(&Sha256::digest(&body), ETAG_HEX_DIGITS);
        let gzip = if compressible(content_type) && body.len() >= GZIP_FILE_BYTES_MIN {
            let compressed = gzip_best(&body);
            (compressed.len() < body.len()).then_some(compressed)
        } else {
            None
        };
        UiFile {
            content_type,
            body,
            gzip,
            etag: format!("\"{hash}\""),
            etag_gzip: format!("\"{hash}-gzip\""),
        }
    }

    /// The bytes a client is sent: gzip when it accepts it and the file has a gzip form.
    pub fn encoded(&self, gzip_accepted: bool) -> (&[u8], &str, bool) {
        match (&self.gzip, gzip_accepted) {
            (Some(gzip), true) => (gzip, &self.etag_gzip, true),
            _ => (&self.body, &self.etag, false),
        }
    }
}

/// The prepared UI of this agent.
#[derive(Debug)]
pub struct UiSite {
    content_path: String,
    fingerprint: String,
    /// By path relative to the site's root (`assets/app.js`), index.html excluded.
    files: HashMap<String, UiFile>,
    /// index.html with the settings filled in.
    index: UiFile,
    /// Whether this is the embedded UI (which gets the strict content security policy).
    embedded: bool,
}

static SITE: OnceLock<Option<UiSite>> = OnceLock::new();

/// Prepares this process's UI from the agent's configuration and logs the UI warnings.
/// A `ui_config.dir` that cannot be served (missing, unreadable, no index.html, too large)
/// stops the agent here, with the reason.
pub fn install(config: &AgentConfig) -> Result<(), String> {
    for warning in &config.ui.warnings {
        log::warn!("{warning}");
    }
    let site = if config.ui.serves() {
        let site = build_site(config)?;
        log::info!(
            "ui: serving the web UI at {} ({}, fingerprint {})",
            site.content_path,
            match &config.ui.dir {
                Some(dir) => format!("from {}", dir.display()),
                None => "embedded".to_string(),
            },
            site.fingerprint
        );
        for (key, set) in [
            ("metrics_provider", !config.ui.metrics_provider.is_empty()),
            (
                "metrics_provider_files",
                !config.ui.metrics_provider_files.is_empty(),
            ),
            (
                "metrics_proxy.base_url",
                !config.ui.metrics_proxy.base_url.is_empty(),
            ),
        ] {
            if set {
                log::warn!(
                    "ui: ui_config.{key} is set, but the praetor UI draws no metrics yet: the \
                     setting is passed to the UI and otherwise unused"
                );
            }
        }
        Some(site)
    } else {
        None
    };
    SITE.set(site)
        .map_err(|_| "the web UI was prepared twice in one process".to_string())
}

/// The site of this process; prepared here if [`install`] was never called (an agent
/// started without the CLI), with a directory that fails to load logged and not served.
fn site(config: &AgentConfig) -> Option<&'static UiSite> {
    SITE.get_or_init(|| {
        if !config.ui.serves() {
            return None;
        }
        build_site(config)
            .map_err(|e| log::error!("ui: not serving the web UI: {e}"))
            .ok()
    })
    .as_ref()
}

/// Builds the site: the files, their fingerprint, and index.html rendered with settings.
pub fn build_site(config: &AgentConfig) -> Result<UiSite, String> {
    let (mut raw, embedded) = match &config.ui.dir {
        Some(dir) => (read_dir_files(dir)?, false),
        None => (
            EMBEDDED_FILES
                .iter()
                .map(|(path, body)| (path.to_string(), Cow::Borrowed(*body)))
                .collect::<Vec<_>>(),
            true,
        ),
    };
    raw.sort_by(|a, b| a.0.cmp(&b.0));
    let Some(index_at) = raw.iter().position(|(path, _)| path == "index.html") else {
        return Err(match &config.ui.dir {
            Some(dir) => format!("ui_config.dir {}: no index.html", dir.display()),
            None => "the embedded UI has no index.html".to_string(),
        });
    };
    let (_, index_template) = raw.remove(index_at);
    let fingerprint = fingerprint_of(&raw);
    let content_path = config.ui.content_path.clone();
    let assets_prefix = format!("{content_path}assets/{fingerprint}/");
    let index = render_index(
        &index_template,
        &content_path,
        &assets_prefix,
        &settings_json(config),
    )?;
    let files = raw
        .into_iter()
        .map(|(path, body)| {
            let file = UiFile::new(&path, body);
            (path, file)
        })
        .collect();
    Ok(UiSite {
        index: UiFile::new("index.html", Cow::Owned(index)),
        content_path,
        fingerprint,
        files,
        embedded,
    })
}

/// Hash of every file's path, length and bytes, in path order.
fn fingerprint_of(files: &[RawFile]) -> String {
    debug_assert!(
        files.windows(2).all(|w| w[0].0 < w[1].0),
        "sorted, no duplicates"
    );
    let mut hasher = Sha256::new();
    for (path, body) in files {
        hasher.update(path.as_bytes());
        hasher.update([0]);
        hasher.update((body.len() as u64).to_le_bytes());
        hasher.update(body);
    }
    hex_prefix(&hasher.finalize(), FINGERPRINT_HEX_DIGITS)
}

fn hex_prefix(bytes: &[u8], digits: usize) -> String {
    let mut out = String::with_capacity(digits);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
        if out.len() >= digits {
            break;
        }
    }
    out.truncate(digits);
    out
}

/// The settings the page reads from its meta tag. The shape is praetor's own.
pub fn settings_json(config: &AgentConfig) -> String {
    let acl_enabled = match config.raw.get("acl") {
        Some(serde_json::Value::Object(acl)) => {
            acl.get("enabled").and_then(|v| v.as_bool()) == Some(true)
        }
        _ => false,
    };
    let options: serde_json::Value = if config.ui.metrics_provider_options_json.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_str(&config.ui.metrics_provider_options_json)
            .unwrap_or_else(|_| serde_json::json!({}))
    };
    serde_json::json!({
        "ContentPath": config.ui.content_path,
        "Datacenter": config.datacenter,
        "NodeName": config.node_name,
        "ACLsEnabled": acl_enabled,
        "MetricsProvider": config.ui.metrics_provider,
        "MetricsProviderOptions": options,
        "DashboardURLTemplates": config.ui.dashboard_url_templates,
        "ConsulVersion": crate::CONSUL_API_VERSION,
        "PraetorVersion": env!("CARGO_PKG_VERSION"),
    })
    .to_string()
}

/// Escapes text for a double-quoted HTML attribute.
fn escape_attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            other => out.push(other),
        }
    }
    out
}

/// Fills index.html's placeholders. A directory of one's own may use none of them.
fn render_index(
    template: &[u8],
    content_path: &str,
    assets_prefix: &str,
    settings: &str,
) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(template).map_err(|_| "index.html is not UTF-8".to_string())?;
    Ok(text
        .replace("{{SETTINGS}}", &escape_attribute(settings))
        .replace("{{CONTENT_PATH}}", &escape_attribute(content_path))
        .replace("{{ASSETS}}", &escape_attribute(assets_prefix))
        .into_bytes())
}

/// Reads a UI directory: regular files below it, by path relative to it with `/`.
fn read_dir_files(root: &Path) -> Result<Vec<RawFile>, String> {
    let describe =
        |e: std::io::Error, path: &Path| format!("ui_config.dir {}: {e}", path.display());
    let mut files = Vec::new();
    let mut total_bytes = 0u64;
    let mut pending = vec![(root.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, prefix, depth)) = pending.pop() {
        if depth > UI_DIR_DEPTH_MAX {
            return Err(format!(
                "ui_config.dir {}: nested deeper than {UI_DIR_DEPTH_MAX} directories",
                root.display()
            ));
        }
        for entry in std::fs::read_dir(&dir).map_err(|e| describe(e, &dir))? {
            let entry = entry.map_err(|e| describe(e, &dir))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                return Err(format!(
                    "ui_config.dir: {} is not a UTF-8 name",
                    path.display()
                ));
            };
            let metadata = std::fs::metadata(&path).map_err(|e| describe(e, &path))?;
            let relative = format!("{prefix}{name}");
            if metadata.is_dir() {
                pending.push((path, format!("{relative}/"), depth + 1));
                continue;
            }
            if !metadata.is_file() {
                continue;
            }
            total_bytes += metadata.len();
            if files.len() >= UI_DIR_FILES_MAX || total_bytes > UI_DIR_BYTES_MAX {
                return Err(format!(
                    "ui_config.dir {}: more than {UI_DIR_FILES_MAX} files or {UI_DIR_BYTES_MAX} bytes",
                    root.display()
                ));
            }
            let body = std::fs::read(&path).map_err(|e| describe(e, &path))?;
            files.push((relative, Cow::Owned(body)));
        }
    }
    Ok(files)
}

fn content_type_of(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map_or("", |(_, e)| e);
    match extension.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "txt" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

fn compressible(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || matches!(
            content_type,
            "application/json" | "image/svg+xml" | "application/xml" | "application/wasm"
        )
}

fn gzip_best(body: &[u8]) -> Vec<u8> {
    // The builder's defaults write no file name and a zero modification time, so the same
    // input always compresses to the same bytes.
    let mut encoder = flate2::GzBuilder::new().write(
        Vec::with_capacity(body.len() / 3),
        flate2::Compression::best(),
    );
    encoder
        .write_all(body)
        .expect("compressing into memory cannot fail");
    encoder
        .finish()
        .expect("compressing into memory cannot fail")
}

/// Whether `If-None-Match` lists `etag` (weak comparison, as the header calls for) or `*`.
fn not_modified(if_none_match: Option<&str>, etag: &str) -> bool {
    let Some(header) = if_none_match else {
        return false;
    };
    header.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
}

/// How long a browser may keep an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caching {
    Immutable,
    Revalidate,
}

/// What a path under the content path resolves to.
#[derive(Debug)]
enum Resolved<'s> {
    Index,
    File(&'s UiFile, Caching),
    Missing,
}

impl UiSite {
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn content_path(&self) -> &str {
        &self.content_path
    }

    /// Resolves `rest`, the request path after the content path.
    fn resolve(&self, rest: &str) -> Resolved<'_> {
        if rest.is_empty() || rest == "index.html" {
            return Resolved::Index;
        }
        if let Some(after) = rest.strip_prefix("assets/") {
            if let Some((first, file)) = after.split_once('/') {
                let fingerprinted = first.len() == FINGERPRINT_HEX_DIGITS
                    && first.bytes().all(|b| b.is_ascii_hexdigit());
                if fingerprinted {
                    // Another build's fingerprint is a 404: its bytes are not ours to give.
                    let found = (first == self.fingerprint)
                        .then(|| self.files.get(&format!("assets/{file}")))
                        .flatten();
                    return match found {
                        Some(found) => Resolved::File(found, Caching::Immutable),
                        None => Resolved::Missing,
                    };
                }
            }
            return match self.files.get(rest) {
                Some(found) => Resolved::File(found, Caching::Revalidate),
                None => Resolved::Missing,
            };
        }
        match self.files.get(rest) {
            Some(found) => Resolved::File(found, Caching::Revalidate),
            None => Resolved::Index,
        }
    }
}

/// Writes one file's answer: 200 with the body (none for HEAD), or a bodiless 304 when the
/// client's copy is current.
fn send_file(request: &Request, reply: &mut Reply, file: &UiFile, caching: Caching, csp: bool) {
    let gzip_accepted = super::ui::accepts_gzip(request.header("Accept-Encoding"));
    let (body, etag, gzipped) = file.encoded(gzip_accepted);
    let mut headers = Vec::with_capacity(512);
    headers.extend_from_slice(b"Cache-Control: ");
    headers.extend_from_slice(match caching {
        Caching::Immutable => CACHE_IMMUTABLE.as_bytes(),
        Caching::Revalidate => CACHE_REVALIDATE.as_bytes(),
    });
    headers.extend_from_slice(b"\r\nETag: ");
    headers.extend_from_slice(etag.as_bytes());
    headers.extend_from_slice(b"\r\nX-Content-Type-Options: nosniff\r\n");
    if file.gzip.is_some() {
        headers.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
    if csp {
        headers.extend_from_slice(b"Content-Security-Policy: ");
        headers.extend_from_slice(CONTENT_SECURITY_POLICY.as_bytes());
        headers.extend_from_slice(b"\r\nReferrer-Policy: same-origin\r\n");
    }
    if not_modified(request.header("If-None-Match"), etag) {
        // A 304 carries the validators but no body and no Content-Length: the length of
        // the 200 it stands for would mislead nobody, a zero would.
        reply
            .out
            .extend_from_slice(b"HTTP/1.1 304 Not Modified\r\n");
        reply.out.extend_from_slice(&headers);
        if !reply.keep_alive {
            reply.out.extend_from_slice(b"Connection: close\r\n");
        }
        reply.out.extend_from_slice(b"\r\n");
        return;
    }
    if gzipped {
        headers.extend_from_slice(b"Content-Encoding: gzip\r\n");
    }
    reply.send(200, Some(file.content_type), &headers, body);
}

/// A `301 Moved Permanently` to `location`, with the short HTML body Go's redirect writes.
fn redirect(reply: &mut Reply, location: &str) {
    let escaped = escape_attribute(location);
    let mut headers = Vec::with_capacity(64 + location.len());
    headers.extend_from_slice(b"Location: ");
    headers.extend_from_slice(escaped.as_bytes());
    headers.extend_from_slice(b"\r\n");
    let body = format!("<a href=\"{escaped}\">Moved Permanently</a>.\n");
    reply.send(
        301,
        Some("text/html; charset=utf-8"),
        &headers,
        body.as_bytes(),
    );
}

const GET_HEAD: &[Method] = &[Method::Get, Method::Head];

/// Serves `/`, `/robots.txt` and everything under the content path, for paths no route of
/// the table serves (the content path is configurable, so it cannot be a row); `None` for
/// the rest.
pub fn serve(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Option<Result<Outcome, ApiError>> {
    let config = ctx.config();
    let path = request.path;
    let content_path = config.ui.content_path.as_str();
    let ours = path == "/"
        || (config.ui.serves()
            && (path == "/robots.txt"
                || path.starts_with(content_path)
                || path == content_path.trim_end_matches('/')));
    if !ours {
        return None;
    }
    match super::routes::allow_method(GET_HEAD, request, reply) {
        Ok(true) => {}
        Ok(false) => return Some(Ok(Outcome::Done)),
        Err(e) => return Some(Err(e)),
    }
    if request.method != Method::Head {
        return answer(config, request, reply);
    }
    // HEAD: the head of the answer a GET gets (its Content-Length included), and no body,
    // whatever the answer is: a body here would be read as the next response.
    let mut scratch = Vec::with_capacity(1024);
    {
        let mut full = Reply::new(&mut scratch, reply.keep_alive, reply.pretty);
        if let Err(error) = answer(config, request, &mut full)? {
            full.error(&error);
        }
    }
    let head_len = scratch
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
        .expect("every answer starts with a complete head");
    reply.out.extend_from_slice(&scratch[..head_len]);
    Some(Ok(Outcome::Done))
}

/// The answer to a GET of one of our paths.
fn answer(
    config: &AgentConfig,
    request: &Request,
    reply: &mut Reply,
) -> Option<Result<Outcome, ApiError>> {
    let path = request.path;
    let content_path = config.ui.content_path.as_str();
    let Some(site) = site(config) else {
        // No UI: `/` says so, as Consul's agent does; nothing else here is ours.
        if path == "/" {
            reply.text(200, UI_DISABLED_TEXT);
            return Some(Ok(Outcome::Done));
        }
        return None;
    };
    debug_assert_eq!(site.content_path, content_path);
    if path == "/" {
        redirect(reply, content_path);
        return Some(Ok(Outcome::Done));
    }
    if path == "/robots.txt" {
        return Some(match site.files.get("robots.txt") {
            Some(file) => {
                send_file(request, reply, file, Caching::Revalidate, false);
                Ok(Outcome::Done)
            }
            None => Err(ApiError::NotFound(format!("404 page not found: {path}"))),
        });
    }
    let Some(rest) = path.strip_prefix(content_path) else {
        // The content path without its trailing slash, as Go's mux redirects it.
        redirect(reply, content_path);
        return Some(Ok(Outcome::Done));
    };
    Some(match site.resolve(rest) {
        Resolved::Index => {
            send_file(
                request,
                reply,
                &site.index,
                Caching::Revalidate,
                site.embedded,
            );
            Ok(Outcome::Done)
        }
        Resolved::File(file, caching) => {
            send_file(request, reply, file, caching, false);
            Ok(Outcome::Done)
        }
        Resolved::Missing => Err(ApiError::NotFound(format!("404 page not found: {path}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{build, ConfigSources};

    fn config(hcl: &str) -> AgentConfig {
        build(&ConfigSources {
            dev: true,
            hcl_snippets: vec![hcl.to_string()],
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn the_embedded_list_is_the_ui_directory() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut on_disk: Vec<String> = read_dir_files(&root)
            .unwrap()
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = EMBEDDED_FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(
            embedded, on_disk,
            "register every file of ui/ in EMBEDDED_FILES"
        );
    }

    #[test]
    fn index_is_rendered_with_settings_and_fingerprinted_asset_urls() {
        let config = config(
            r#"ui_config {
                content_path = "/console"
                dashboard_url_templates { service = "https://dash/x?s={{Service.Name}}" }
            }"#,
        );
        let site = build_site(&config).unwrap();
        assert_eq!(site.content_path(), "/console/");
        let index = std::str::from_utf8(&site.index.body).unwrap();
        for placeholder in ["{{SETTINGS}}", "{{ASSETS}}", "{{CONTENT_PATH}}"] {
            assert!(
                !index.contains(placeholder),
                "{placeholder} is filled: {index}"
            );
        }
        let prefix = format!("/console/assets/{}/", site.fingerprint());
        assert!(index.contains(&format!("{prefix}app.js")), "{index}");
        assert!(index.contains(&format!("{prefix}style.css")), "{index}");
        // The settings are an attribute: its quotes are escaped, and unescaped they parse.
        let start = index
            .find("name=\"praetor-ui/settings\" content=\"")
            .unwrap();
        let rest = &index[start + "name=\"praetor-ui/settings\" content=\"".len()..];
        let attribute = &rest[..rest.find('"').unwrap()];
        let json = attribute
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        let settings: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(settings["ContentPath"], "/console/");
        assert_eq!(settings["Datacenter"], "dc1");
        assert_eq!(settings["ACLsEnabled"], false);
        assert_eq!(
            settings["DashboardURLTemplates"]["service"],
            "https://dash/x?s={{Service.Name}}"
        );
    }

    #[test]
    fn paths_resolve_to_index_files_or_nothing() {
        let site = build_site(&config("")).unwrap();
        let fp = site.fingerprint().to_string();
        assert!(matches!(site.resolve(""), Resolved::Index));
        assert!(matches!(
            site.resolve("dc1/services/web/instances"),
            Resolved::Index
        ));
        assert!(matches!(
            site.resolve(&format!("assets/{fp}/app.js")),
            Resolved::File(_, Caching::Immutable)
        ));
        assert!(matches!(
            site.resolve(&format!("assets/{fp}/views/kv.js")),
            Resolved::File(_, Caching::Immutable)
        ));
        assert!(matches!(
            site.resolve("assets/app.js"),
            Resolved::File(_, Caching::Revalidate)
        ));
        assert!(matches!(
            site.resolve("assets/000000000000/app.js"),
            Resolved::Missing
        ));
        assert!(matches!(
            site.resolve(&format!("assets/{fp}/nope.js")),
            Resolved::Missing
        ));
        assert!(matches!(site.resolve("assets/nope.js"), Resolved::Missing));
        assert!(matches!(
            site.resolve("assets/../index.html"),
            Resolved::Missing
        ));
        assert!(matches!(
            site.resolve("robots.txt"),
            Resolved::File(_, Caching::Revalidate)
        ));
    }

    #[test]
    fn text_files_compress_reproducibly_and_carry_distinct_etags() {
        let a = build_site(&config("")).unwrap();
        let b = build_site(&config("")).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let app = &a.files["assets/app.js"];
        let (gzip, gzip_etag, gzipped) = app.encoded(true);
        let (plain, plain_etag, plain_gzipped) = app.encoded(false);
        assert!(gzipped && !plain_gzipped);
        assert!(gzip.len() < plain.len());
        assert_ne!(gzip_etag, plain_etag);
        assert_eq!(
            gzip,
            b.files["assets/app.js"].encoded(true).0,
            "same bytes every build"
        );
        let mut decoded = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gzip), &mut decoded).unwrap();
        assert_eq!(decoded, plain);
        assert_eq!(app.content_type, "text/javascript; charset=utf-8");
    }

    #[test]
    fn etags_match_weakly_and_by_wildcard() {
        assert!(not_modified(Some("\"abc\""), "\"abc\""));
        assert!(not_modified(Some("W/\"x\", \"abc\""), "\"abc\""));
        assert!(not_modified(Some("W/\"abc\""), "\"abc\""));
        assert!(not_modified(Some("*"), "\"abc\""));
        assert!(!not_modified(Some("\"abd\""), "\"abc\""));
        assert!(!not_modified(None, "\"abc\""));
    }

    #[test]
    fn a_ui_directory_replaces_the_embedded_files() {
        let dir = std::env::temp_dir().join(format!("praetor-ui-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("assets/js")).unwrap();
        std::fs::write(
            dir.join("index.html"),
            "<html><meta content=\"{{SETTINGS}}\"><script src=\"{{ASSETS}}js/x.js\"></script></html>",
        )
        .unwrap();
        std::fs::write(dir.join("assets/js/x.js"), "console.log(1)").unwrap();
        let hcl = format!("ui_config {{ dir = \"{}\" }}", dir.display());
        let site = build_site(&config(&hcl)).unwrap();
        assert!(!site.embedded);
        assert!(site.files.contains_key("assets/js/x.js"));
        assert!(!site.files.contains_key("assets/app.js"));
        let index = std::str::from_utf8(&site.index.body).unwrap();
        assert!(index.contains(&format!("/ui/assets/{}/js/x.js", site.fingerprint())));
        std::fs::remove_file(dir.join("index.html")).unwrap();
        let error = build_site(&config(&hcl)).unwrap_err();
        assert!(error.contains("no index.html"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
        let error = build_site(&config(&hcl)).unwrap_err();
        assert!(error.contains("ui_config.dir"), "{error}");
    }
}
