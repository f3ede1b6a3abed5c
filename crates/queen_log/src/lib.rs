//! Pure core of queen_ack: everything that needs no PostgreSQL.
//!
//! - [`conventions`]: the queue-mode group, the default tenant, the lease-time default.
//! - [`hash`]: xxh3-128 transactionId hashes (big-endian, 16 bytes) and their hex tokens.
//! - [`frame`]: the frame codec of docs/contract.md §3.
//! - [`segment`]: zstd segment blobs (one zstd frame over concatenated frames).
//! - [`payload`]: how a stored payload reads back as JSON (one rule for every reader).
//! - [`fetch`]: reads by offset (Queen 2.x's fetch): request bounds, ranges, byte budgets.
//! - [`encryption`]: Queen's encrypted-payload envelope, and (feature `cipher`) its AES-256-GCM.
//! - [`ephemeral`]: ephemeral queues (Queen 2.x): options, message ids, owner placement.
//! - [`ack`]: the ack decision procedure of docs/contract.md §6 as a pure function.
//! - [`pop`]: the pop's decisions of docs/contract.md §5 (seeding, slices, lease transitions).
//! - [`dedup`]: the push dedup probe of docs/contract.md §4 as a pure scan.
//! - [`lifecycle`]: retention's rules of docs/contract.md §13 (what goes, what a cursor loses).
//! - [`dlq`]: the error text a dead-lettered frame is filed with, and redrive's rules.
//! - [`stats`]: lag and queue statistics rolled up with Queen's arithmetic.
//! - [`streams`]: stream processing cycles (Queen's `/streams/v1`): shapes, bounds, replay digest.
//! - [`order`]: the global lock order.
//! - [`sqlstate`]: what an error's SQLSTATE means to a caller.
//! - [`wire`]: the typed JSON results the extension returns and the broker reads.
//! - [`names`]: the length rule of queue, partition and consumer-group names (§14).
//! - [`browse`]: message browsing: statuses from the cursors, listings by offsets.
//! - [`kv`]: Queen 2.x's versioned key/value: reading an op, a write's verdict.
//! - [`locks`]: Queen 2.x's locks and semaphores, as rows of the key/value.
//! - [`options`]: queue options: every key `configure` takes and the one check of them.
//! - [`segment_cache`]: recently decoded segments, per thread.
//! - [`served`]: a pop's rows turned into their messages (the one decode loop).
//! - [`timers`]: Queen 2.x's scheduled messages: an op's shape, bounds and answers.
//! - [`time`]: the one form of an instant in an answer (`iso_ms`).
//!
//! Shared by the extension (`queen_ack`) and the broker (`queen_broker`), so that both
//! encode, hash, decide and read results exactly alike.

pub mod ack;
pub mod browse;
pub mod conventions;
pub mod dedup;
pub mod dlq;
pub mod encryption;
pub mod ephemeral;
pub mod fetch;
pub mod frame;
pub mod hash;
pub mod kv;
pub mod lifecycle;
pub mod locks;
pub mod names;
pub mod options;
pub mod order;
pub mod payload;
pub mod pop;
pub mod segment;
pub mod segment_cache;
pub mod served;
pub mod sqlstate;
pub mod stats;
pub mod streams;
pub mod time;
pub mod timers;
pub mod wire;

/// The module list above names every module of the crate (a maintainer reads it first).
#[cfg(test)]
mod module_list {
    #[test]
    fn the_crate_doc_names_every_module() {
        let lib = include_str!("lib.rs");
        let doc: String = lib.lines().filter(|l| l.starts_with("//!")).collect();
        for line in lib.lines() {
            if let Some(m) = line.strip_prefix("pub mod ") {
                let m = m.trim_end_matches(';');
                assert!(
                    doc.contains(&format!("[`{m}`]")),
                    "lib.rs's list misses `{m}`"
                );
            }
        }
    }
}
