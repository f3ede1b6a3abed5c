//! TransactionId hashes (docs/contract.md §3): xxh3-128 with seed 0 over the id's UTF-8 bytes,
//! stored big-endian (high half first) as 16 raw bytes, and written on the wire as
//! 32 lowercase hex characters.
//!
//! Both the extension and the broker hash through this module so that a hash computed
//! on one side always matches the other byte for byte.

use std::fmt;

/// A transactionId hash: xxh3-128 (seed 0), big-endian, 16 bytes.
pub type TxnHash = [u8; 16];

/// A map keyed by transactionId hashes. The keys are already xxh3 output, so hashing
/// them again (SipHash) is wasted work on the hot scans (dedup probe, ack resolution):
/// [`TxnHasher`] just takes the first 8 bytes.
pub type TxnHashMap<V> =
    std::collections::HashMap<TxnHash, V, std::hash::BuildHasherDefault<TxnHasher>>;

/// Identity-style hasher for [`TxnHash`] keys (see [`TxnHashMap`]).
#[derive(Default, Clone, Copy)]
pub struct TxnHasher(u64);

impl std::hash::Hasher for TxnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    /// Folds the bytes in 8 at a time; for a 16-byte key the first 8 are already uniform.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word);
        }
    }

    /// The slice length prefix carries no information for fixed-size keys.
    fn write_usize(&mut self, _len: usize) {}
}

/// Number of hex characters in a wire hash token (two per byte).
const HEX_LEN: usize = 32;

/// Lowercase hex digits, indexed by nibble value.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Why a hash token or a packed hash list was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashError {
    /// The hex token does not have exactly 32 characters; holds the character count.
    BadHexLength(usize),
    /// The hex token has a character outside `[0-9a-fA-F]`.
    NotHex {
        /// Character position (0-based) of the offending character.
        index: usize,
        /// The offending character.
        ch: char,
    },
    /// A packed hash list whose byte length is not a multiple of 16; holds the length.
    BadListLength(usize),
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadHexLength(n) => {
                write!(
                    f,
                    "hash hex token must be {HEX_LEN} hex characters, got {n}"
                )
            }
            Self::NotHex { index, ch } => write!(
                f,
                "hash hex token has non-hex character {ch:?} at position {index}"
            ),
            Self::BadListLength(n) => write!(
                f,
                "packed hash list must be a multiple of 16 bytes, got {n} bytes"
            ),
        }
    }
}

impl std::error::Error for HashError {}

/// Hashes a transactionId. Big-endian output keeps the byte order identical to the
/// canonical hex rendering of the 128-bit value, so hex tokens and raw bytes agree.
pub fn txn_hash(txn_id: &str) -> TxnHash {
    xxhash_rust::xxh3::xxh3_128(txn_id.as_bytes()).to_be_bytes()
}

/// Renders any bytes as lowercase hex; the wire form of hashes is always lowercase.
pub fn hash_hex(h: &[u8]) -> String {
    let mut s = String::with_capacity(h.len() * 2);
    for &b in h {
        s.push(char::from(HEX_DIGITS[usize::from(b >> 4)]));
        s.push(char::from(HEX_DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// Parses a wire hash token. Uppercase is accepted (it denotes the same value), but the
/// length must be exactly 32 so that truncated or padded tokens never alias a real hash.
pub fn parse_hash_hex(s: &str) -> Result<TxnHash, HashError> {
    let count = s.chars().count();
    if count != HEX_LEN {
        return Err(HashError::BadHexLength(count));
    }
    let mut nibbles = [0u8; HEX_LEN];
    for (index, ch) in s.chars().enumerate() {
        // `to_digit(16)` is at most 15, so the cast cannot truncate.
        nibbles[index] = ch.to_digit(16).ok_or(HashError::NotHex { index, ch })? as u8;
    }
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(nibbles.chunks_exact(2)) {
        *byte = (pair[0] << 4) | pair[1];
    }
    Ok(out)
}

/// Splits a packed list of hashes (as stored in a segment's hash column) into hashes.
/// A length that is not a multiple of 16 means the list is damaged, so it is rejected
/// rather than silently dropping a partial hash.
pub fn split_hashes(b: &[u8]) -> Result<Vec<TxnHash>, HashError> {
    if !b.len().is_multiple_of(16) {
        return Err(HashError::BadListLength(b.len()));
    }
    Ok(b.chunks_exact(16)
        .map(|c| {
            let mut h = [0u8; 16];
            h.copy_from_slice(c);
            h
        })
        .collect())
}

/// Packs hashes into one byte string, 16 bytes each, in order; inverse of [`split_hashes`].
pub fn join_hashes(hs: &[TxnHash]) -> Vec<u8> {
    hs.concat()
}

#[cfg(test)]
mod tests {
    #[test]
    fn txn_hash_map_finds_keys_by_full_value() {
        let mut m = super::TxnHashMap::default();
        let (a, b) = (super::txn_hash("a"), super::txn_hash("b"));
        m.insert(a, 1);
        let mut a_twin = b;
        a_twin[..8].copy_from_slice(&a[..8]); // same prefix, different key
        assert_eq!(m.get(&a), Some(&1));
        assert_eq!(m.get(&a_twin), None);
    }

    use super::*;

    #[test]
    fn known_vector_empty() {
        assert_eq!(hash_hex(&txn_hash("")), "99aa06d3014798d86001c324468d497f");
    }

    #[test]
    fn known_vector_hello() {
        assert_eq!(
            hash_hex(&txn_hash("hello")),
            "b5e9c1ad071b3e7fc779cfaa5e523818"
        );
    }

    #[test]
    fn hash_is_big_endian_of_u128() {
        let v = xxhash_rust::xxh3::xxh3_128(b"abc");
        assert_eq!(txn_hash("abc")[0], (v >> 120) as u8);
        assert_eq!(txn_hash("abc")[15], v as u8);
    }

    #[test]
    fn hex_round_trip() {
        let h = txn_hash("order-42");
        let s = hash_hex(&h);
        assert_eq!(s.len(), 32);
        assert!(s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        assert_eq!(parse_hash_hex(&s), Ok(h));
    }

    #[test]
    fn hex_of_arbitrary_bytes() {
        assert_eq!(hash_hex(&[]), "");
        assert_eq!(hash_hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }

    #[test]
    fn uppercase_hex_accepted() {
        let upper = "B5E9C1AD071B3E7FC779CFAA5E523818";
        assert_eq!(parse_hash_hex(upper), Ok(txn_hash("hello")));
        let mixed = "b5E9c1AD071b3e7fC779cfaa5e523818";
        assert_eq!(parse_hash_hex(mixed), Ok(txn_hash("hello")));
    }

    #[test]
    fn hex_wrong_length_rejected() {
        let short = "b5e9c1ad071b3e7fc779cfaa5e52381";
        let err = parse_hash_hex(short).unwrap_err();
        assert_eq!(err, HashError::BadHexLength(31));
        assert_eq!(
            err.to_string(),
            "hash hex token must be 32 hex characters, got 31"
        );
        let long = "b5e9c1ad071b3e7fc779cfaa5e5238180";
        assert_eq!(parse_hash_hex(long), Err(HashError::BadHexLength(33)));
        assert_eq!(parse_hash_hex(""), Err(HashError::BadHexLength(0)));
    }

    #[test]
    fn non_hex_rejected() {
        let bad = "b5e9c1ad071b3e7fc779cfaa5e52381g";
        let err = parse_hash_hex(bad).unwrap_err();
        assert_eq!(err, HashError::NotHex { index: 31, ch: 'g' });
        assert_eq!(
            err.to_string(),
            "hash hex token has non-hex character 'g' at position 31"
        );
        // 32 characters but not all ASCII: still a non-hex rejection, never a panic.
        let wide = "é5e9c1ad071b3e7fc779cfaa5e523818";
        assert_eq!(
            parse_hash_hex(wide),
            Err(HashError::NotHex { index: 0, ch: 'é' })
        );
        assert!(parse_hash_hex(" 5e9c1ad071b3e7fc779cfaa5e523818").is_err());
        assert!(parse_hash_hex("+5e9c1ad071b3e7fc779cfaa5e523818").is_err());
    }

    #[test]
    fn split_and_join_round_trip() {
        let hs = vec![txn_hash("a"), txn_hash("b"), txn_hash("c")];
        let packed = join_hashes(&hs);
        assert_eq!(packed.len(), 48);
        assert_eq!(&packed[16..32], &hs[1]);
        assert_eq!(split_hashes(&packed), Ok(hs));
        assert_eq!(split_hashes(&[]), Ok(vec![]));
        assert!(join_hashes(&[]).is_empty());
    }

    #[test]
    fn split_rejects_partial_hash() {
        assert_eq!(split_hashes(&[0; 15]), Err(HashError::BadListLength(15)));
        assert_eq!(split_hashes(&[0; 17]), Err(HashError::BadListLength(17)));
        assert_eq!(
            HashError::BadListLength(17).to_string(),
            "packed hash list must be a multiple of 16 bytes, got 17 bytes"
        );
    }
}
