//! Pure core of queen_ack: everything that needs no PostgreSQL.
//!
//! - [`hash`]: xxh3-128 transactionId hashes (big-endian, 16 bytes) and their hex tokens.
//! - [`frame`]: the frame codec of contract §3.
//! - [`segment`]: zstd segment blobs (one zstd frame over concatenated frames).
//! - [`ack`]: the ack decision procedure of contract §6 as a pure function.
//! - [`dedup`]: the push dedup probe of contract §4 as a pure scan.
//!
//! Shared by the extension (`queen_ack`) and the broker (`queen_broker`), so that both
//! encode, hash and decide exactly alike.

pub mod ack;
pub mod dedup;
pub mod frame;
pub mod hash;
pub mod segment;
