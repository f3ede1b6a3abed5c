//! Shutdown: the real `queen-broker` binary, a real database. On
//! SIGTERM parked long-polls answer 204 at once and the process exits promptly, however
//! long their timeout; the drain of requests still in flight is bounded by
//! QUEEN_SHUTDOWN_DRAIN_MS. Only generous bounds are asserted (the machine is shared).

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The broker binary with extra environment; returns it and its listen address, read
/// from its "listening on" log line.
fn spawn(env: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queen-broker"));
    cmd.env("QUEEN_DATABASE_URL", common::broker_url())
        .env("QUEEN_LISTEN", "127.0.0.1:0")
        .env("QUEEN_POOL_SIZE", "2")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn queen-broker");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some((_, rest)) = line.split_once("listening on ") {
                let a: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                    .collect();
                let _ = tx.send(a);
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the broker logs its address");
    (child, addr)
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok);
}

/// Waits for the process to exit, at most `limit`: Some(exit code, time taken).
async fn exited_within(child: &mut Child, limit: Duration) -> Option<(i32, Duration)> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some((status.code().unwrap_or(-1), t0.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Kills the process if a failed assertion left it running.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn sigterm_answers_parked_long_polls_204_and_exits_promptly() {
    let (child, addr) = spawn(&[]);
    let mut child = Reap(child);
    let http = reqwest::Client::new();
    let q = common::unique("shutdown");
    // A long-poll of ten minutes, parked on a queue that stays empty, and an idle
    // keep-alive connection.
    let poll = tokio::spawn({
        let url = format!("http://{addr}/api/v1/pop/queue/{q}?wait=true&timeout=600000");
        let http = http.clone();
        async move { http.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    let idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the long-poll is parked");
    sigterm(&child.0);
    let (code, took) = exited_within(&mut child.0, Duration::from_secs(20))
        .await
        .expect("the broker must not wait out a parked long-poll");
    assert_eq!(code, 0, "a clean exit");
    let status = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the long-poll was answered")
        .unwrap()
        .expect("an answer, not a cut connection");
    assert_eq!(status, 204);
    println!("exited {took:?} after SIGTERM with a parked long-poll and an idle connection");
    drop(idle);
}

#[tokio::test]
async fn the_drain_of_a_request_in_flight_is_bounded() {
    // The body timeout is off, so only the drain bound can end this upload.
    let (child, addr) = spawn(&[
        ("QUEEN_SHUTDOWN_DRAIN_MS", "1000"),
        ("QUEEN_BODY_READ_TIMEOUT_MS", "0"),
    ]);
    let mut child = Reap(child);
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"items\": [",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    sigterm(&child.0);
    let (code, took) = exited_within(&mut child.0, Duration::from_secs(20))
        .await
        .expect("the drain must be bounded by QUEEN_SHUTDOWN_DRAIN_MS");
    assert_eq!(code, 0);
    // The stalled connection was cut: EOF (or a reset), no answer.
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "{}", String::from_utf8_lossy(&buf[..n]));
    println!("exited {took:?} after SIGTERM with a request stalled in flight");
}
