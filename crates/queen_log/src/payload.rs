//! How a stored payload reads back as JSON: one rule for every reader (the HTTP pop and
//! DLQ listing, the psql helpers `queen.pop` / `decode_segment_v1`, DLQ filing).
//!
//! - an empty payload is JSON `null`;
//! - a payload that is JSON text comes back as that JSON, verbatim (never re-encoded, so
//!   big integers and number formatting survive);
//! - any other UTF-8 text (e.g. an encrypted payload written by another producer) comes
//!   back as a JSON string holding that text;
//! - bytes that are not UTF-8 come back as a JSON string holding their standard base64.

use std::borrow::Cow;

use base64::Engine;
use serde_json::value::RawValue;

use crate::frame::Frame;

/// A frame's payload as JSON text, by the rule above.
pub fn json_text(f: &Frame) -> Cow<'_, str> {
    json_text_of(&f.payload)
}

/// The rule on raw payload bytes.
pub fn json_text_of(payload: &[u8]) -> Cow<'_, str> {
    match json_raw_of(payload) {
        Cow::Borrowed(raw) => Cow::Borrowed(raw.get()),
        Cow::Owned(raw) => Cow::Owned(raw.get().to_string()),
    }
}

/// The rule as a `RawValue`, which serde writes verbatim: borrowed from the frame when
/// the payload is JSON text (validated once, never rebuilt), else an owned JSON string.
pub fn json_raw_of(payload: &[u8]) -> Cow<'_, RawValue> {
    const NULL: &str = "null";
    let owned = |s: String| Cow::Owned(RawValue::from_string(s).expect("a quoted string is JSON"));
    if payload.is_empty() {
        return Cow::Borrowed(serde_json::from_str(NULL).expect("null is JSON"));
    }
    match std::str::from_utf8(payload) {
        Ok(text) => match serde_json::from_str::<&RawValue>(text) {
            Ok(raw) => Cow::Borrowed(raw),
            Err(_) => owned(quote(text)),
        },
        Err(_) => owned(quote(
            &base64::engine::general_purpose::STANDARD.encode(payload),
        )),
    }
}

/// The payload as a parsed JSON value (for `jsonb` results).
pub fn json_value(f: &Frame) -> serde_json::Value {
    serde_json::from_str(&json_text(f)).expect("json_text always yields valid JSON")
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_null() {
        assert_eq!(json_text_of(b""), "null");
    }

    #[test]
    fn json_text_is_kept_verbatim() {
        let big = r#"{"n": 123456789012345678901234567890, "f": 1.50}"#;
        assert_eq!(json_text_of(big.as_bytes()), big);
        assert!(matches!(json_text_of(big.as_bytes()), Cow::Borrowed(_)));
    }

    #[test]
    fn other_text_becomes_a_json_string() {
        assert_eq!(json_text_of(b"not json"), r#""not json""#);
        assert_eq!(json_text_of(b"a\"b"), r#""a\"b""#);
    }

    #[test]
    fn non_utf8_bytes_become_a_base64_string() {
        assert_eq!(json_text_of(&[0xff, 0x00, 0x10]), r#""/wAQ""#);
    }

    #[test]
    fn every_rendering_parses() {
        for p in [&b""[..], b"1", b"x", &[0xc3, 0x28], b"[1,2"] {
            let v: serde_json::Value = serde_json::from_str(&json_text_of(p)).unwrap();
            assert!(!v.is_object());
        }
    }
}
