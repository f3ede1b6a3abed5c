//! `QUEEN_WEBAPP_ROOT` (Queen's `WEBAPP_ROOT`, `static_files.cpp`): the broker serves a
//! built web app (Queen's dashboard, unchanged) from that folder, so a browser needs no
//! proxy in front of the API. `GET /` is `index.html`; any other path is the file it
//! names, or `index.html` for the app's own client-side routes (`/assets/...` excepted:
//! a missing asset is a 404). Paths of the API (`/api/`, `/health`, `/metrics`,
//! `/streams/`, `/internal/`) are never files.
//!
//! A path is resolved component by component: percent-decoded, and refused (404,
//! nothing read) when a component is `..`, `.`, holds a NUL or a backslash, or when the
//! file it names resolves (symlinks followed) outside the root.

use std::path::{Path, PathBuf};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::state::AppState;

/// Paths that belong to the API, never to the web app.
const API_PREFIXES: [&str; 5] = ["/api/", "/health", "/metrics", "/streams/", "/internal/"];

/// The router's fallback for GET when `QUEEN_WEBAPP_ROOT` is set.
pub async fn serve(State(state): State<AppState>, uri: Uri) -> Response {
    let Some(root) = state.config.webapp_root.clone() else {
        return not_found();
    };
    let path = uri.path().to_string();
    if API_PREFIXES.iter().any(|p| path.starts_with(p)) {
        return not_found();
    }
    let asset = path.starts_with("/assets/");
    let answer = tokio::task::spawn_blocking(move || {
        let file = match resolve(&root, &path) {
            Resolved::Refused => return None,
            Resolved::File(f) => Some(f),
            Resolved::Missing => None,
        };
        let file = file.or_else(|| (!asset).then(|| root.join("index.html")))?;
        let body = std::fs::read(&file).ok()?;
        Some((content_type(&file), body))
    })
    .await
    .ok()
    .flatten();
    match answer {
        Some((ct, body)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, HeaderValue::from_static(ct))],
            body,
        )
            .into_response(),
        None => not_found(),
    }
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": "not found" }))).into_response()
}

/// What a request path names under the root.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// A regular file inside the root.
    File(PathBuf),
    /// Nothing there (or a directory): the app's index may answer.
    Missing,
    /// A path that tries to leave the root: nothing is read.
    Refused,
}

/// Resolves `path` (the request's, percent-encoded) under `root`.
pub fn resolve(root: &Path, path: &str) -> Resolved {
    let mut out = root.to_path_buf();
    let mut any = false;
    for raw in path.split('/').filter(|s| !s.is_empty()) {
        let Some(seg) = percent_decode(raw) else {
            return Resolved::Refused;
        };
        if seg == ".." || seg == "." || seg.contains(['\0', '\\', '/']) {
            return Resolved::Refused;
        }
        out.push(seg);
        any = true;
    }
    if !any {
        return Resolved::Missing;
    }
    let (Ok(real), Ok(real_root)) = (out.canonicalize(), root.canonicalize()) else {
        return Resolved::Missing;
    };
    if !real.starts_with(&real_root) {
        return Resolved::Refused;
    }
    if real.is_file() {
        Resolved::File(real)
    } else {
        Resolved::Missing
    }
}

/// `%XX` decoded; None for a malformed escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The content type of a built web app's files, by extension.
fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "ico" => "image/x-icon",
        "webp" => "image/webp",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "txt" => "text/plain; charset=utf-8",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_and_odd_components_are_refused() {
        let root = std::env::temp_dir().join(format!("webroot-{}", std::process::id()));
        std::fs::create_dir_all(root.join("assets")).unwrap();
        std::fs::write(root.join("assets/app.js"), "x").unwrap();
        for p in [
            "/../etc/passwd",
            "/assets/../../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/assets/%2E%2E/%2e%2e/etc/passwd",
            "/a%5c..%5cb",
            "/a%00b",
            "/%zz",
            "/assets/./app.js",
            "/a%2f..%2f..%2fetc",
        ] {
            assert_eq!(resolve(&root, p), Resolved::Refused, "{p}");
        }
        assert!(matches!(
            resolve(&root, "/assets/app.js"),
            Resolved::File(_)
        ));
        assert_eq!(resolve(&root, "/queues/q1"), Resolved::Missing);
        assert_eq!(resolve(&root, "/"), Resolved::Missing);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
