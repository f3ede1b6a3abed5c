//! Where the CPU of a run goes, read from /proc: the bench process (the load generators),
//! a broker, and every PostgreSQL process of the machine (backends and background
//! processes: the bench's cluster is the only one running). The account of a run whose
//! two cores are busy says which part a faster path would have to come from.

use std::time::Instant;

/// Kernel clock ticks per second of /proc's utime and stime (USER_HZ: 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// The fields of `/proc/<pid>/stat` after the command name (field 3 of the line is index
/// 0 here); empty when the process is gone.
fn stat_fields(pid: u32) -> Vec<u64> {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Vec::new();
    };
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return Vec::new();
    };
    // The state (a letter) parses to 0; every later field is a number.
    rest.split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .collect()
}

/// utime + stime of a process, in ticks (0 when it is gone).
fn ticks(pid: u32) -> u64 {
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let f = stat_fields(pid);
    f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)
}

/// One PostgreSQL cluster's CPU, in ticks: its postmaster's own utime + stime, its cutime +
/// cstime (the children it has reaped: backends that exited are counted too), and the
/// utime + stime of its live children. Other clusters on the machine are not counted.
fn cluster_ticks(postmaster: u32) -> u64 {
    let f = stat_fields(postmaster);
    let own: u64 = (11..=14).map(|i| f.get(i).unwrap_or(&0)).sum();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return own;
    };
    own + dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .map(stat_fields)
        // The parent pid is field 4, index 1 after the name.
        .filter(|f| f.get(1) == Some(&u64::from(postmaster)))
        .map(|f| f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0))
        .sum::<u64>()
}

/// The postmaster of the cluster a connection talks to: the parent of its backend.
pub async fn postmaster_of(db: &tokio_postgres::Client) -> Option<u32> {
    let row = db.query_one("SELECT pg_backend_pid()", &[]).await.ok()?;
    let backend = u32::try_from(row.get::<_, i32>(0)).ok()?;
    u32::try_from(*stat_fields(backend).get(1)?).ok()
}

/// The PostgreSQL processes now: every process whose command name is `postgres`.
fn postgres_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(ticks)
        .sum()
}

/// CPU seconds spent by each part between [`Account::start`] and [`Account::finish`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Spent {
    pub generator: f64,
    pub broker: f64,
    pub postgres: f64,
    pub wall: f64,
}

impl Spent {
    /// Microseconds of CPU per message of each part, and how busy the cores were.
    pub fn per_message(&self, msgs: f64) -> String {
        let us = |s: f64| s * 1e6 / msgs.max(1.0);
        format!(
            "{:.0} / {:.0} / {:.0} ({:.2} cores)",
            us(self.generator),
            us(self.broker),
            us(self.postgres),
            (self.generator + self.broker + self.postgres) / self.wall.max(1e-9)
        )
    }
}

/// The CPU counters at the start of a run.
pub struct Account {
    broker_pid: u32,
    /// Count this cluster only (its postmaster's pid), else every `postgres` process.
    postmaster: Option<u32>,
    generator: u64,
    broker: u64,
    postgres: u64,
    at: Instant,
}

impl Account {
    pub fn start(broker_pid: u32) -> Self {
        Self::start_in(broker_pid, None)
    }

    /// As [`Account::start`], PostgreSQL counted as the one cluster of `postmaster` (backends
    /// that exit during the run included) when given: the account stays right on a machine
    /// running other clusters.
    pub fn start_in(broker_pid: u32, postmaster: Option<u32>) -> Self {
        Self {
            broker_pid,
            postmaster,
            generator: ticks(std::process::id()),
            broker: ticks(broker_pid),
            postgres: postmaster.map_or_else(postgres_ticks, cluster_ticks),
            at: Instant::now(),
        }
    }

    /// What each part spent since the start. Backends that exited in between are missed:
    /// read it while the run's connections are open.
    pub fn finish(&self) -> Spent {
        let secs = |t: u64| t as f64 / TICKS_PER_SECOND;
        Spent {
            generator: secs(ticks(std::process::id()).saturating_sub(self.generator)),
            broker: secs(ticks(self.broker_pid).saturating_sub(self.broker)),
            postgres: secs(
                self.postmaster
                    .map_or_else(postgres_ticks, cluster_ticks)
                    .saturating_sub(self.postgres),
            ),
            wall: self.at.elapsed().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_counted() {
        let a = Account::start(std::process::id());
        let mut x = 0u64;
        // Burn until /proc shows 0.15 s of CPU (a loaded machine, or a test beside this
        // one, gives this thread less than a core; a wall-clock loop came out at 0.09 s).
        let start = ticks(std::process::id());
        let until = Instant::now() + std::time::Duration::from_secs(10);
        while ticks(std::process::id()) < start + 15 && Instant::now() < until {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        assert!(x > 0);
        let s = a.finish();
        assert!(s.generator >= 0.1, "{s:?}");
        assert!(s.per_message(1000.0).contains("cores"));
    }

    #[test]
    fn a_cluster_counts_the_children_it_reaped() {
        // This process stands for a postmaster: a child that burned CPU and exited is
        // counted through cutime/cstime once waited for (a backend that ended mid-run).
        let before = cluster_ticks(std::process::id());
        let st = std::process::Command::new("timeout")
            .args(["0.4", "sh", "-c", "while :; do :; done"])
            .status()
            .unwrap();
        assert!(!st.success()); // ended by timeout
        let spent = cluster_ticks(std::process::id()) - before;
        assert!(spent >= 20, "{spent} ticks");
    }
}
