//! `queen-bench`: the benchmark harness of queen_ack.
//!
//!     queen-bench --database-url URL [--quick] [--out DIR] [--log-dir DIR] [--broker-bin PATH] [--sections 1,2,3,4,5,6,7,8,9,10,11,12,13,14]
//!                 [--cells CxB,...]
//!
//! Sections (bench/README.md): 1 SQL ack paths at shallow vs deep sidecar history,
//! 2 broker ack throughput per mode, 3 end to end through the broker, 4 scaling curves,
//! 5 the peers (pgmq, PgQ) side by side with queen_ack, 6 encrypted vs plain queues,
//! 7 binary push bodies vs JSON, 8 timer delivery lateness, 9 key/value, locks and
//! transaction riders, 10 ephemeral queues against durable ones, 11 stream cycles against
//! the separate calls they replace, 12 pushes through the push spool against direct ones,
//! 13 the sampled history: its cost, its size and its routes, 14 queen-broker against
//! Queen MQ's own C++ server.
//! Writes `report.md` and SVG charts into the results folder (default results/bench),
//! rewriting the report after every section; progress lines go to stderr.

mod binary_push;
mod broker_proc;
mod broker_throughput;
mod common;
mod cpu;
mod encryption;
mod end_to_end;
mod ephemeral;
mod history;
mod kv_locks;
mod peers;
mod report;
mod scaling;
mod spool;
mod sql_paths;
mod streams;
mod svg;
mod timer_lateness;
mod versus_queen;
mod wire;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{connect, install_helpers, progress, workspace_root, BResult, Ctx};
use report::Section;

const USAGE: &str = "usage: queen-bench --database-url URL [--quick] [--out DIR] [--log-dir DIR] [--broker-bin PATH] [--sections 1,2,3,4,5,6,7,8,9,10,11,12,13,14] [--cells CxB,...]";

struct Args {
    database_url: String,
    quick: bool,
    out: PathBuf,
    logs: PathBuf,
    broker_bin: Option<PathBuf>,
    sections: Vec<u8>,
    cells: Option<Vec<(usize, usize)>>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        database_url: std::env::var("QUEEN_BENCH_DATABASE_URL").unwrap_or_default(),
        quick: false,
        out: PathBuf::new(),
        logs: PathBuf::new(),
        broker_bin: None,
        sections: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
        cells: None,
    };
    let mut out = None;
    let mut logs = None;
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--database-url" => a.database_url = value("--database-url")?,
            "--quick" => a.quick = true,
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--log-dir" => logs = Some(PathBuf::from(value("--log-dir")?)),
            "--broker-bin" => a.broker_bin = Some(PathBuf::from(value("--broker-bin")?)),
            "--sections" => {
                a.sections = value("--sections")?
                    .split(',')
                    .map(|s| s.trim().parse::<u8>().ok().filter(|n| (1..=14).contains(n)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("--sections takes numbers 1-14\n{USAGE}"))?
            }
            "--cells" => a.cells = Some(parse_cells(&value("--cells")?)?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if a.database_url.is_empty() {
        return Err(format!("--database-url is required\n{USAGE}"));
    }
    a.out = out.unwrap_or_else(|| workspace_root().join("results").join("bench"));
    a.logs = logs.unwrap_or_else(|| default_log_dir(&workspace_root(), &a.out));
    Ok(a)
}

/// Where run logs go when `--log-dir` is not given: under `target/bench-logs/`, mirroring
/// the results folder's path below `results/` (so `results/bench-citus/one-1` logs to
/// `target/bench-logs/bench-citus/one-1`), else its last component. Logs are not
/// committed; reports and charts are.
fn default_log_dir(root: &Path, out: &Path) -> PathBuf {
    let logs = root.join("target").join("bench-logs");
    let abs = if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(out)
    };
    match abs.strip_prefix(root.join("results")) {
        Ok(rel) if !rel.as_os_str().is_empty() => logs.join(rel),
        _ => logs.join(out.file_name().unwrap_or_else(|| "bench".as_ref())),
    }
}

/// `--cells 64x10,8x1`: (consumers, batch) points of section 2 instead of its grid.
fn parse_cells(v: &str) -> Result<Vec<(usize, usize)>, String> {
    v.split(',')
        .map(|c| {
            let (n, b) = c.trim().split_once('x')?;
            Some((n.parse().ok()?, b.parse().ok()?)).filter(|&(n, b)| n > 0 && b > 0)
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("--cells takes CxB pairs like 64x10,8x1\n{USAGE}"))
}

/// The release broker next to this binary's target directory.
fn default_broker_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let release = dir.parent().map(|t| t.join("release").join("queen-broker"));
    match release {
        Some(p) if p.exists() => p,
        _ => workspace_root().join("target/release/queen-broker"),
    }
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(cmd).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

async fn header(ctx: &Ctx, db: &tokio_postgres::Client, done: &[Section]) -> String {
    let q = db
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'utc', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
                    current_setting('server_version'), current_setting('fsync'),
                    current_setting('synchronous_commit'), current_setting('shared_buffers'),
                    (SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'),
                    (SELECT string_agg(application_name || ' ' || sync_state, ', ')
                       FROM pg_stat_replication)",
            &[],
        )
        .await;
    let (now, ver, fsync, sync, sb, ext, standbys) = match q {
        Ok(r) => (
            r.get::<_, String>(0),
            r.get::<_, String>(1),
            r.get::<_, String>(2),
            r.get::<_, String>(3),
            r.get::<_, String>(4),
            r.get::<_, Option<String>>(5).unwrap_or_default(),
            r.get::<_, Option<String>>(6),
        ),
        Err(e) => (
            format!("? ({e})"),
            "?".into(),
            "?".into(),
            "?".into(),
            "?".into(),
            "?".into(),
            None,
        ),
    };
    // bench/run.sh --sync-standby: every commit waits for a streaming standby's flush.
    let standbys = standbys.map_or_else(
        || "no standby".to_string(),
        |s| format!("**standbys: {s}** (a commit waits for a `sync` one)"),
    );
    let rev = sh(
        "git",
        &[
            "-C",
            &workspace_root().display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    )
    .unwrap_or_else(|| "?".into());
    let dirty = sh(
        "git",
        &[
            "-C",
            &workspace_root().display().to_string(),
            "status",
            "--porcelain",
        ],
    )
    .is_some_and(|s| !s.is_empty());
    let lib = match db
        .query_opt(
            // The library of the installed version (a library per version).
            "SELECT setting, (SELECT extversion FROM pg_extension WHERE extname = 'queen_ack')
               FROM pg_config WHERE name = 'PKGLIBDIR'",
            &[],
        )
        .await
    {
        Ok(Some(r)) => {
            let version = r.get::<_, Option<String>>(1).unwrap_or_default();
            let path = PathBuf::from(r.get::<_, String>(0)).join(format!("queen_ack-{version}.so"));
            match std::fs::metadata(&path) {
                // A dev-profile build is tens of MB (debug info, no optimisation); release ~5 MB.
                Ok(m) => format!(
                    "; library {} {:.1} MB{}",
                    path.display(),
                    m.len() as f64 / 1e6,
                    if m.len() > 20_000_000 {
                        " — **looks like a debug build: figures not representative**"
                    } else {
                        ""
                    }
                ),
                Err(_) => String::new(),
            }
        }
        _ => String::new(),
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mut h = String::new();
    h.push_str("# queen_ack benchmark report\n\n");
    h.push_str(&format!(
        "- run: {now}, mode **{}**, total wall time so far {:.1} s\n\
         - machine: {cpus} CPUs, {}\n\
         - PostgreSQL {ver}, fsync = {fsync}, synchronous_commit = {sync}, shared_buffers = {sb}, {standbys}; queen_ack {ext}{lib}\n\
         - git {rev}{}; broker binary `{}`\n\
         - command: `queen-bench {}`\n\n",
        if ctx.quick { "quick" } else { "full" },
        ctx.started.elapsed().as_secs_f64(),
        sh("uname", &["-sr"]).unwrap_or_default(),
        if dirty { " (uncommitted changes)" } else { "" },
        ctx.broker_bin.display(),
        std::env::args().skip(1).map(|a| if a.contains("://") { "<url>".into() } else { a }).collect::<Vec<_>>().join(" ")
    ));
    h.push_str(
        "Timing conventions: **server** = clock_timestamp() read inside PostgreSQL around the one call \
         (function cost, no network, no commit); **client** = wall clock in this process around a statement \
         or HTTP request (network, parsing, commit included). Figures measured on a busy machine are noisy; \
         compare ratios within one run.\n\n",
    );
    let names: Vec<String> = done
        .iter()
        .map(|s| format!("{} ({:.1} s)", s.title, s.secs))
        .collect();
    if !names.is_empty() {
        h.push_str(&format!("Sections: {}.\n", names.join("; ")));
    }
    h
}

async fn run(args: Args) -> BResult<()> {
    let ctx = Ctx {
        database_url: args.database_url.clone(),
        quick: args.quick,
        out: args.out.clone(),
        logs: args.logs.clone(),
        broker_bin: args.broker_bin.clone().unwrap_or_else(default_broker_bin),
        started: Instant::now(),
        cells: args.cells.clone(),
    };
    std::fs::create_dir_all(&ctx.out).map_err(|e| format!("{}: {e}", ctx.out.display()))?;
    std::fs::create_dir_all(&ctx.logs).map_err(|e| format!("{}: {e}", ctx.logs.display()))?;
    progress(
        &ctx,
        "main",
        format!(
            "{} run, sections {:?}, results in {}",
            if ctx.quick { "quick" } else { "full" },
            args.sections,
            ctx.out.display()
        ),
    );
    let mut db = connect(&ctx.database_url).await?;
    db.batch_execute("SET client_min_messages = warning")
        .await
        .map_err(|e| e.to_string())?;
    // Only sections 1 and 4 call the helpers. They are DDL, which a Citus worker refuses,
    // so the other sections can run against a worker taking client connections.
    if args.sections.iter().any(|s| matches!(s, 1 | 4)) {
        install_helpers(&db).await?;
    }
    let _ = db
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await;
    let mut fixtures = sql_paths::Fixtures::default();
    let mut done: Vec<Section> = Vec::new();
    let mut failed = Vec::new();
    for s in &args.sections {
        if db.is_closed() {
            // A crashed backend (e.g. the extension's library replaced under a running
            // server) ends only the section it hit: reconnect for the next one.
            progress(&ctx, "main", "database connection lost: reconnecting");
            db = connect(&ctx.database_url).await?;
            db.batch_execute("SET client_min_messages = warning")
                .await
                .map_err(common::to_s)?;
        }
        let t = Instant::now();
        progress(&ctx, "main", format!("section {s} starts"));
        let r = match s {
            1 => sql_paths::run(&ctx, &db, &mut fixtures).await,
            2 => broker_throughput::run(&ctx, &db).await,
            3 => end_to_end::run(&ctx, &db).await,
            5 => peers::run(&ctx, &db).await,
            6 => encryption::run(&ctx, &db).await,
            7 => binary_push::run(&ctx, &db).await,
            8 => timer_lateness::run(&ctx, &db).await,
            9 => kv_locks::run(&ctx, &db).await,
            10 => ephemeral::run(&ctx, &db).await,
            11 => streams::run(&ctx, &db).await,
            12 => spool::run(&ctx, &db).await,
            13 => history::run(&ctx, &db).await,
            14 => versus_queen::run(&ctx, &db).await,
            _ => scaling::run(&ctx, &db, &mut fixtures).await,
        };
        let mut sec = r.unwrap_or_else(|e| {
            progress(&ctx, "main", format!("section {s} FAILED: {e}"));
            failed.push(*s);
            let mut f = Section::new(format!("{s}. (failed)"));
            f.para(format!("**This section failed:** {e}"));
            f
        });
        sec.secs = t.elapsed().as_secs_f64();
        progress(
            &ctx,
            "main",
            format!("section {s} done in {:.1} s", sec.secs),
        );
        done.push(sec);
        let h = header(&ctx, &db, &done).await;
        report::write(&ctx.out, &h, &done)?;
    }
    let _ = common::drop_queues(&db, "bench\\_sql\\_d%").await;
    let h = header(&ctx, &db, &done).await;
    let path = report::write(&ctx.out, &h, &done)?;
    progress(
        &ctx,
        "main",
        format!(
            "report: {} (total {:.1} s)",
            path.display(),
            ctx.started.elapsed().as_secs_f64()
        ),
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("sections {failed:?} failed (see the report)"))
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("queen-bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::default_log_dir;
    use std::path::Path;

    #[test]
    fn run_logs_mirror_the_results_path_under_target() {
        let root = Path::new("/ws");
        assert_eq!(
            default_log_dir(root, Path::new("/ws/results/bench-citus/one-1")),
            Path::new("/ws/target/bench-logs/bench-citus/one-1")
        );
        assert_eq!(
            default_log_dir(root, Path::new("/ws/results/bench")),
            Path::new("/ws/target/bench-logs/bench")
        );
    }

    #[test]
    fn run_logs_of_a_folder_outside_results_go_by_its_name() {
        let root = Path::new("/ws");
        assert_eq!(
            default_log_dir(root, Path::new("/elsewhere/my-run")),
            Path::new("/ws/target/bench-logs/my-run")
        );
        assert_eq!(
            default_log_dir(root, Path::new("/ws/results")),
            Path::new("/ws/target/bench-logs/results")
        );
    }
}
