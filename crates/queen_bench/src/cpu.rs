//! Where the CPU of a run goes, read from /proc: the bench process (the load generators),
//! a broker, and every PostgreSQL process of the machine (backends and background
//! processes: the bench's cluster is the only one running). The account of a run whose
//! two cores are busy says which part a faster path would have to come from.

use std::time::Instant;

/// Kernel clock ticks per second of /proc's utime and stime (USER_HZ: 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// utime + stime of a process, in ticks (0 when it is gone).
fn ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(11) + get(12)
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
    generator: u64,
    broker: u64,
    postgres: u64,
    at: Instant,
}

impl Account {
    pub fn start(broker_pid: u32) -> Self {
        Self {
            broker_pid,
            generator: ticks(std::process::id()),
            broker: ticks(broker_pid),
            postgres: postgres_ticks(),
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
            postgres: secs(postgres_ticks().saturating_sub(self.postgres)),
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
        let until = Instant::now() + std::time::Duration::from_millis(300);
        while Instant::now() < until {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        let s = a.finish();
        assert!(s.generator >= 0.1, "{s:?}");
        assert!(s.per_message(1000.0).contains("cores"));
    }
}
