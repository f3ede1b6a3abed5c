//! `QUEEN_WEBAPP_ROOT` (http/static_files.rs): a built web app served at `/` beside the
//! API, its client-side routes answered with `index.html`, and no way out of its folder:
//! traversal is sent as raw request bytes (an HTTP client would normalize it away).

use crate::common;

use std::path::PathBuf;

use common::{start, start_with};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

/// A web root with an index, an asset, and a secret beside it (outside the root) that a
/// symlink inside the root points to.
fn web_root() -> (PathBuf, PathBuf) {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("web-{}", Uuid::new_v4()));
    let root = base.join("dist");
    std::fs::create_dir_all(root.join("assets")).unwrap();
    std::fs::write(
        root.join("index.html"),
        "<!doctype html><title>queen</title>",
    )
    .unwrap();
    std::fs::write(root.join("assets/app.js"), "console.log('queen')").unwrap();
    std::fs::write(base.join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(base.join("secret.txt"), root.join("assets/leak.txt")).unwrap();
    (base, root)
}

/// One raw GET of `path` (bytes as given): status line and body.
async fn raw_get(base: &str, path: &str) -> (String, String) {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out.lines().next().unwrap_or("").to_string();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// webapp::the_app_is_served_beside_the_api
#[tokio::test]
async fn the_app_is_served_beside_the_api() {
    let (_base, root) = web_root();
    let b = start_with(move |c| c.webapp_root = Some(root)).await;
    let get = |p: &str| b.http.get(format!("{}{p}", b.base)).send();
    let r = get("/").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(r.text().await.unwrap().contains("<title>queen</title>"));
    let r = get("/assets/app.js").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    // A client-side route of the app: its index.
    let r = get("/queues/orders").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("<title>queen</title>"));
    // A missing asset, and the API's own unknown paths, are 404 JSON, never the index.
    for p in [
        "/assets/missing.js",
        "/api/v1/no-such-route",
        "/metricsx",
        "/streams/v1/none",
    ] {
        let r = get(p).await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{p}");
        assert!(r.text().await.unwrap().contains("\"error\""), "{p}");
    }
    // The API still answers.
    let r = get("/health").await.unwrap();
    assert!(r.text().await.unwrap().contains("\"status\""));
}

/// webapp::no_path_leaves_the_root: traversal in every spelling, and a symlink out of
/// the root, answer 404 and never the secret.
#[tokio::test]
async fn no_path_leaves_the_root() {
    let (_base, root) = web_root();
    let b = start_with(move |c| c.webapp_root = Some(root)).await;
    for p in [
        "/../secret.txt",
        "/assets/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/assets/%2E%2E/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/assets/..%5c..%5csecret.txt",
        "/assets/leak.txt",
    ] {
        let (status, body) = raw_get(&b.base, p).await;
        assert!(!body.contains("TOP-SECRET"), "{p} leaked: {status}");
        assert!(
            status.contains("404") || status.contains("400"),
            "{p}: {status}"
        );
    }
}

/// webapp::without_a_root_nothing_is_served
#[tokio::test]
async fn without_a_root_nothing_is_served() {
    let b = start().await;
    let r = b.http.get(format!("{}/", b.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// webapp::a_root_that_is_not_a_directory_stops_the_broker
#[test]
fn a_root_that_is_not_a_directory_stops_the_broker() {
    let missing = format!("/nonexistent-{}", Uuid::new_v4());
    let err =
        queen_broker::Config::from_lookup(|k| (k == "QUEEN_WEBAPP_ROOT").then(|| missing.clone()))
            .unwrap_err();
    assert!(err.contains("QUEEN_WEBAPP_ROOT"), "{err}");
}
