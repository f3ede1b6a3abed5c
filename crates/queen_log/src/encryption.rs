//! Encrypted payloads (docs/decisions.md, "Payload encryption"), in Queen's format so that
//! data written by one reads by the other:
//!
//! - the key is `QUEEN_ENCRYPTION_KEY`: 32 bytes as 64 hex digits;
//! - the plaintext is the payload's JSON text; AES-256-GCM with a random 16-byte IV
//!   (Queen's size, not GCM's usual 12) and a 16-byte tag, no associated data;
//! - the stored payload is the JSON object `{"encrypted", "iv", "authTag"}`, each the
//!   standard base64 (with padding) of the ciphertext, the IV and the tag;
//! - the frame carries flag 4 (docs/contract.md §3), so readers need not guess.
//!
//! The shape check ([`is_envelope`]) is the extension's: it refuses a frame flagged
//! encrypted whose payload is not such an object. The cipher (feature `cipher`) is the
//! broker's alone: the key never reaches the database.

use serde::{Deserialize, Serialize};

/// The environment variable holding the key (Queen's name).
pub const KEY_VAR: &str = "QUEEN_ENCRYPTION_KEY";
/// Key, IV and tag sizes in bytes (Queen's services/encryption.cpp).
pub const KEY_LEN: usize = 32;
pub const IV_LEN: usize = 16;
pub const TAG_LEN: usize = 16;

/// The stored form of an encrypted payload.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// base64 of the ciphertext.
    pub encrypted: String,
    /// base64 of the 16-byte IV.
    pub iv: String,
    /// base64 of the 16-byte GCM tag.
    #[serde(rename = "authTag")]
    pub auth_tag: String,
}

impl Envelope {
    /// The envelope a payload's bytes hold, if they are exactly one (JSON text of an
    /// object with the three string keys and nothing else, IV and tag of the right
    /// sizes).
    pub fn parse(payload: &[u8]) -> Option<Envelope> {
        let e: Envelope = serde_json::from_slice(payload).ok()?;
        let ok = |s: &str, n: usize| b64(s).is_some_and(|b| b.len() == n);
        (ok(&e.iv, IV_LEN) && ok(&e.auth_tag, TAG_LEN) && b64(&e.encrypted).is_some()).then_some(e)
    }
}

/// Whether a payload is an envelope: what a frame flagged encrypted must hold.
pub fn is_envelope(payload: &[u8]) -> bool {
    Envelope::parse(payload).is_some()
}

fn b64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// Why `QUEEN_ENCRYPTION_KEY` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadKey(pub String);

impl std::fmt::Display for BadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{KEY_VAR}: {}", self.0)
    }
}

/// The key's 32 bytes from its 64 hex digits (either case; surrounding blanks ignored).
pub fn parse_key(hex: &str) -> Result<[u8; KEY_LEN], BadKey> {
    let hex = hex.trim();
    if hex.len() != 2 * KEY_LEN {
        return Err(BadKey(format!(
            "must be {KEY_LEN} bytes as {} hex digits, got {} characters",
            2 * KEY_LEN,
            hex.len()
        )));
    }
    let mut key = [0u8; KEY_LEN];
    for (i, byte) in key.iter_mut().enumerate() {
        let pair = hex.get(2 * i..2 * i + 2).unwrap_or("");
        *byte = u8::from_str_radix(pair, 16)
            .map_err(|_| BadKey(format!("'{pair}' at position {} is not hex", 2 * i)))?;
    }
    Ok(key)
}

#[cfg(feature = "cipher")]
pub use cipher::{Cipher, DecryptError};

#[cfg(feature = "cipher")]
mod cipher {
    use aes_gcm::aead::consts::U16;
    use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
    use aes_gcm::aes::Aes256;
    use aes_gcm::{AesGcm, Nonce};
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;

    use super::{Envelope, KEY_LEN, TAG_LEN};

    /// AES-256-GCM with Queen's 16-byte IV.
    type Gcm = AesGcm<Aes256, U16>;

    /// The broker's payload cipher, built once from the key.
    #[derive(Clone)]
    pub struct Cipher(Gcm);

    /// Why an envelope did not decrypt: not an envelope, or the tag did not verify (another
    /// key, or tampered bytes), or the plaintext is not JSON text.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum DecryptError {
        NotEnvelope,
        Authentication,
        NotJson,
    }

    impl Cipher {
        pub fn new(key: &[u8; KEY_LEN]) -> Cipher {
            Cipher(Gcm::new(key.into()))
        }

        /// The envelope of a payload's JSON text, as the JSON text stored in its frame.
        pub fn seal(&self, plaintext: &[u8]) -> Vec<u8> {
            let iv = Gcm::generate_nonce(&mut OsRng);
            let mut sealed = self
                .0
                .encrypt(&iv, plaintext)
                .expect("AES-GCM encryption of an in-memory buffer cannot fail");
            let tag = sealed.split_off(sealed.len() - TAG_LEN);
            let env = Envelope {
                encrypted: STANDARD.encode(&sealed),
                iv: STANDARD.encode(iv),
                auth_tag: STANDARD.encode(tag),
            };
            serde_json::to_vec(&env).expect("an envelope serialises")
        }

        /// The JSON text an envelope (as stored) holds.
        pub fn open(&self, payload: &[u8]) -> Result<String, DecryptError> {
            let env = Envelope::parse(payload).ok_or(DecryptError::NotEnvelope)?;
            let decode = |s: &str| STANDARD.decode(s).map_err(|_| DecryptError::NotEnvelope);
            let mut sealed = decode(&env.encrypted)?;
            sealed.extend(decode(&env.auth_tag)?);
            let iv = decode(&env.iv)?;
            let plain = self
                .0
                .decrypt(Nonce::<U16>::from_slice(&iv), sealed.as_slice())
                .map_err(|_| DecryptError::Authentication)?;
            let text = String::from_utf8(plain).map_err(|_| DecryptError::NotJson)?;
            serde_json::from_str::<&serde_json::value::RawValue>(&text)
                .map_err(|_| DecryptError::NotJson)?;
            Ok(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn keys() {
        assert_eq!(parse_key(KEY).unwrap()[31], 0x1f);
        assert_eq!(parse_key(&KEY.to_uppercase()).unwrap()[10], 0x0a);
        assert!(parse_key("abc").unwrap_err().0.contains("64 hex digits"));
        let bad = format!("zz{}", &KEY[2..]);
        assert!(parse_key(&bad).unwrap_err().0.contains("not hex"));
    }

    #[test]
    fn envelope_shape() {
        let iv = "AAAAAAAAAAAAAAAAAAAAAA==";
        let ok = format!(r#"{{"encrypted":"YQ==","iv":"{iv}","authTag":"{iv}"}}"#);
        assert!(is_envelope(ok.as_bytes()));
        for bad in [
            r#"{"encrypted":"YQ==","iv":"AAAA","authTag":"AAAAAAAAAAAAAAAAAAAAAA=="}"#.to_string(),
            format!(r#"{{"encrypted":"YQ==","iv":"{iv}"}}"#),
            format!(r#"{{"encrypted":"*","iv":"{iv}","authTag":"{iv}"}}"#),
            format!(r#"{{"encrypted":"YQ==","iv":"{iv}","authTag":"{iv}","x":1}}"#),
            r#""plain""#.to_string(),
            "not json".to_string(),
        ] {
            assert!(!is_envelope(bad.as_bytes()), "{bad}");
        }
    }

    #[cfg(feature = "cipher")]
    #[test]
    fn seal_and_open() {
        let c = Cipher::new(&parse_key(KEY).unwrap());
        let text = br#"{"n":123456789012345678901234567890,"s":"\u00e9"}"#;
        let sealed = c.seal(text);
        assert!(is_envelope(&sealed));
        assert_eq!(c.open(&sealed).unwrap().as_bytes(), text);
        // A fresh IV each time: the same plaintext never seals alike.
        assert_ne!(c.seal(text), sealed);
        let other = Cipher::new(&[7u8; KEY_LEN]);
        assert_eq!(other.open(&sealed), Err(DecryptError::Authentication));
        assert_eq!(c.open(b"{}"), Err(DecryptError::NotEnvelope));
    }

    /// A vector sealed by Queen's services/encryption.cpp (OpenSSL EVP_aes_256_gcm, 16-byte
    /// IV) under KEY must open here; computed independently with Python's `cryptography`.
    #[cfg(feature = "cipher")]
    #[test]
    fn opens_queen_format() {
        let c = Cipher::new(&parse_key(KEY).unwrap());
        let env = include_str!("encryption_vector.json");
        assert_eq!(
            c.open(env.trim().as_bytes()).unwrap(),
            r#"{"hello":"queen"}"#
        );
    }
}
