//! pgmq as a peer: installed into the bench database from the SQL that the `pgmq` crate
//! (crates.io, version locked in Cargo.lock) embeds for `install_sql_from_embedded` —
//! no network, no `CREATE EXTENSION`, and none of pgmq's SQL copied into this repository.
//!
//! Two ways, same file (bench/README.md says why the first is the default):
//! - default: `cargo metadata` names the locked crate's source directory (cargo has
//!   downloaded it: the crate is an optional dependency of queen_bench), and the bench runs
//!   its fresh-install script `src/install/embedded/sql/pgmq.sql` in one transaction over
//!   the simple-query protocol, as the crate's installer does. Nothing of the crate or of
//!   its sqlx stack is compiled.
//! - `--features pgmq-crate`: the crate's own `pgmq::install::install_sql_from_embedded`
//!   over its sqlx pool (which also records `pgmq.__pgmq_migrations`).

use std::path::{Path, PathBuf};

use tokio_postgres::Client;

use crate::common::{to_s, BResult};

/// The fresh-install script inside a pgmq crate source directory.
const SCRIPT: &str = "src/install/embedded/sql/pgmq.sql";
/// Its control file: `default_version` is the SQL version the script installs.
const CONTROL: &str = "src/install/embedded/pgmq.control";

/// The pgmq package's source directory in `cargo metadata` JSON output.
pub fn crate_dir_from_metadata(json: &str) -> BResult<(String, PathBuf)> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("cargo metadata output: {e}"))?;
    let pkg = v["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "pgmq"))
        .ok_or("cargo metadata lists no pgmq package (is the optional dependency in crates/queen_bench/Cargo.toml?)")?;
    let manifest = pkg["manifest_path"]
        .as_str()
        .ok_or("pgmq package without manifest_path")?;
    let dir = Path::new(manifest)
        .parent()
        .ok_or("pgmq manifest_path has no parent")?;
    Ok((
        pkg["version"].as_str().unwrap_or("?").to_string(),
        dir.to_path_buf(),
    ))
}

/// `default_version = '1.11.1'` of a control file.
pub fn control_version(control: &str) -> Option<String> {
    control.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "default_version").then(|| v.trim().trim_matches('\'').to_string())
    })
}

/// Runs `cargo metadata` on this workspace with the optional pgmq dependency selected,
/// so the locked version's source is resolved (and downloaded if missing).
fn locate() -> BResult<(String, PathBuf)> {
    let manifest = crate::workspace_root().join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--features",
        ])
        .arg("queen_bench/pgmq-crate")
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    crate_dir_from_metadata(&String::from_utf8_lossy(&out.stdout))
}

/// Installs pgmq into the (fresh) database `db`, whose URL is `url`; returns how, for
/// the report.
#[cfg(not(feature = "pgmq-crate"))]
pub async fn install(db: &Client, _url: &str) -> BResult<String> {
    let (crate_version, dir) = locate()?;
    let sql = std::fs::read_to_string(dir.join(SCRIPT))
        .map_err(|e| format!("{}: {e}", dir.join(SCRIPT).display()))?;
    let sql_version = std::fs::read_to_string(dir.join(CONTROL))
        .ok()
        .and_then(|c| control_version(&c))
        .unwrap_or_else(|| "?".into());
    // Simple-query protocol (the script has DO blocks and dollar quotes), one transaction.
    db.batch_execute(&format!("BEGIN;\n{sql}\n;COMMIT;"))
        .await
        .map_err(|e| format!("installing pgmq from {}: {}", dir.display(), to_s(&e)))?;
    Ok(format!(
        "pgmq crate {crate_version}'s embedded `{SCRIPT}` (pgmq SQL {sql_version}), run by the bench"
    ))
}

#[cfg(feature = "pgmq-crate")]
pub async fn install(db: &Client, url: &str) -> BResult<String> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .map_err(|e| format!("sqlx pool for pgmq's installer: {}", to_s(&e)))?;
    pgmq::install::install_sql_from_embedded(&pool)
        .await
        .map_err(|e| format!("pgmq::install::install_sql_from_embedded: {}", to_s(&e)))?;
    pool.close().await;
    let sql_version = locate()
        .ok()
        .and_then(|(_, d)| std::fs::read_to_string(d.join(CONTROL)).ok())
        .and_then(|c| control_version(&c))
        .unwrap_or_else(|| "?".into());
    let _ = db;
    Ok(format!(
        "`pgmq::install::install_sql_from_embedded` (feature pgmq-crate; it runs the crate's `{SCRIPT}`, pgmq SQL {sql_version})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_crate_and_its_version() {
        let json = r#"{"packages":[{"name":"tokio","version":"1.0.0","manifest_path":"/r/tokio-1.0.0/Cargo.toml"},
            {"name":"pgmq","version":"0.33.7","manifest_path":"/r/pgmq-0.33.7/Cargo.toml"}]}"#;
        let (v, dir) = crate_dir_from_metadata(json).unwrap();
        assert_eq!(v, "0.33.7");
        assert_eq!(dir, PathBuf::from("/r/pgmq-0.33.7"));
        assert!(crate_dir_from_metadata(r#"{"packages":[]}"#).is_err());
        assert!(crate_dir_from_metadata("not json").is_err());
        assert_eq!(
            control_version("comment = 'x'\ndefault_version = '1.11.1'\n"),
            Some("1.11.1".into())
        );
        assert_eq!(control_version("comment = 'x'"), None);
    }
}
