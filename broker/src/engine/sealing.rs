//! Payload encryption (docs/decisions.md, "Payload encryption"): pushes to a queue with
//! `encryptionEnabled` are sealed here with `QUEEN_ENCRYPTION_KEY` into Queen's envelope
//! (queen_log::encryption) and flagged encrypted in their frame; readers of this broker
//! get them back decrypted. The key lives in this process only: the database stores
//! ciphertext and refuses a plaintext frame into such a queue, so a broker without the
//! key cannot write one in clear either.
//!
//! Only this broker seals (docs/security.md, "Only the broker seals"): no request may say
//! that its payload is sealed already. Every write path (push, binary push, transaction,
//! stream sink, timers) reads items without such a flag, and seals with [`Sealer::seal_for`]
//! every item whose queue encrypts; without a key that is a refusal ([`NoKey`], 503 with
//! code `encryption_key_missing`), never a 500 and never a plaintext or forged frame.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use queen_log::encryption::{Cipher, Envelope};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::EncryptionKey;

/// The broker's cipher, if it has a key, and its counts (exposed by crate::ops).
pub struct Sealer {
    cipher: Option<Cipher>,
    sealed: AtomicU64,
    opened: AtomicU64,
    unopened: AtomicU64,
}

/// An item for a queue that encrypts reached a broker without `QUEEN_ENCRYPTION_KEY`:
/// refused (crate::error turns it into a 503 naming the queue and the missing key).
#[derive(Debug)]
pub struct NoKey {
    pub queue: String,
}

/// Payloads sealed on push, opened for a reader, and served unopened.
#[derive(Clone, Copy, Debug, Default)]
pub struct SealStats {
    pub sealed: u64,
    pub opened: u64,
    pub unopened: u64,
}

impl Sealer {
    pub fn new(key: Option<&EncryptionKey>) -> Sealer {
        Sealer {
            cipher: key.map(|k| Cipher::new(&k.0)),
            sealed: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            unopened: AtomicU64::new(0),
        }
    }

    /// Whether this broker can seal (configure refuses `encryptionEnabled` otherwise).
    pub fn has_key(&self) -> bool {
        self.cipher.is_some()
    }

    pub fn stats(&self) -> SealStats {
        SealStats {
            sealed: self.sealed.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            unopened: self.unopened.load(Ordering::Relaxed),
        }
    }

    /// A push item's payload (JSON text; empty means null) as the envelope stored in its
    /// frame. None without a key.
    pub fn seal(&self, payload: &[u8]) -> Option<Vec<u8>> {
        let c = self.cipher.as_ref()?;
        let text: &[u8] = if payload.is_empty() { b"null" } else { payload };
        self.sealed.fetch_add(1, Ordering::Relaxed);
        Some(c.seal(text))
    }

    /// The payload of an item bound for `queue`, which encrypts, sealed; [`NoKey`] when
    /// this broker cannot (nothing may be written then).
    pub fn seal_for(&self, queue: &str, payload: &[u8]) -> Result<Vec<u8>, NoKey> {
        self.seal(payload).ok_or_else(|| NoKey {
            queue: queue.to_string(),
        })
    }

    /// What a reader gets for a stored payload flagged encrypted: its JSON decrypted, or,
    /// when this broker cannot open it (no key, another key, tampered bytes), the
    /// envelope as stored — which says what it is — counted and logged, never garbage.
    pub fn open<'a>(&self, stored: Cow<'a, RawValue>) -> Cow<'a, RawValue> {
        match self.open_text(stored.get().as_bytes()) {
            Some(text) => Cow::Owned(RawValue::from_string(text).expect("opened text is JSON")),
            None => stored,
        }
    }

    /// A payload inside a JSON answer of the extension (the DLQ listing, a message by
    /// address), where the frame's flag is not carried: an object of exactly Queen's
    /// envelope shape is opened, as Queen's own routes do; anything else stays.
    pub fn open_raw(&self, stored: Box<RawValue>) -> Box<RawValue> {
        if Envelope::parse(stored.get().as_bytes()).is_none() {
            return stored;
        }
        match self.open_text(stored.get().as_bytes()) {
            Some(text) => RawValue::from_string(text).expect("opened text is JSON"),
            None => stored,
        }
    }

    /// `open_raw` on a parsed value.
    pub fn open_value(&self, v: &mut Value) {
        if !v.is_object() {
            return;
        }
        let Ok(raw) = serde_json::value::to_raw_value(v) else {
            return;
        };
        if Envelope::parse(raw.get().as_bytes()).is_none() {
            return;
        }
        if let Some(text) = self.open_text(raw.get().as_bytes()) {
            if let Ok(plain) = serde_json::from_str(&text) {
                *v = plain;
            }
        }
    }

    fn open_text(&self, envelope: &[u8]) -> Option<String> {
        let opened = match &self.cipher {
            Some(c) => c.open(envelope).map_err(|e| format!("{e:?}")),
            None => Err("this broker has no QUEEN_ENCRYPTION_KEY".to_string()),
        };
        match opened {
            Ok(text) => {
                self.opened.fetch_add(1, Ordering::Relaxed);
                Some(text)
            }
            Err(why) => {
                self.unopened.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%why, "an encrypted payload could not be opened; served as its envelope");
                None
            }
        }
    }
}
