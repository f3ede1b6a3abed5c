//! How a stored payload reads back as JSON: one rule for every reader (the HTTP pop and
//! DLQ listing, the psql helpers `queen.pop` / `decode_segment_v1`, DLQ filing).
//!
//! - an empty payload is JSON `null`;
//! - a payload that is JSON text comes back as that JSON, verbatim (never re-encoded, so
//!   big integers and number formatting survive);
//! - any other UTF-8 text (e.g. an encrypted payload written by another producer) comes
//!   back as a JSON string holding that text;
//! - bytes that are not UTF-8 come back as a JSON string holding their standard base64;
//! - JSON text that PostgreSQL's `jsonb` cannot hold ([`jsonb_unstorable`]: a `\u0000`, a
//!   lone surrogate escape, a number outside `numeric`) comes back as a JSON string
//!   holding that text. No write path stores such a payload (they refuse it with
//!   [`check_write`] / [`check_frame`]); a segment an older version wrote still reads,
//!   message by message, and such a message can still be failed and dead-lettered
//!   (docs/decisions.md, "Payloads and names").

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
            Ok(raw) if jsonb_unstorable(text).is_none() => Cow::Borrowed(raw),
            _ => owned(quote(text)),
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

/// What PostgreSQL's `jsonb` cannot hold, found in JSON text. A payload is stored as
/// bytes, but every reader that is SQL (`queen.pop`, `decode_segment_v1`, the DLQ row,
/// the fetch and message routes) passes it through `jsonb`, so a payload with one of
/// these could be written but never read, failed or dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unstorable {
    /// `\u0000` in a string or key at this byte (jsonb's text cannot hold NUL).
    Nul { at: usize },
    /// A UTF-16 surrogate escape without its pair at this byte.
    LoneSurrogate { at: usize },
    /// A number at this byte outside PostgreSQL `numeric` (more than 131072 digits
    /// before the point or 16383 after it, exponent included).
    Number { at: usize },
    /// A NUL character in a text field (transactionId, producer subject).
    NulInText,
}

impl Unstorable {
    /// The SQLSTATE the extension raises for it: 22P05 (untranslatable_character) for
    /// what text cannot hold, 22003 (numeric_value_out_of_range) for a number.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Unstorable::Number { .. } => "22003",
            _ => "22P05",
        }
    }
}

impl std::fmt::Display for Unstorable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unstorable::Nul { at } => write!(
                f,
                "\\u0000 at byte {at}: PostgreSQL cannot store a NUL character in JSON text"
            ),
            Unstorable::LoneSurrogate { at } => write!(
                f,
                "a lone UTF-16 surrogate escape at byte {at}: not a Unicode character"
            ),
            Unstorable::Number { at } => write!(
                f,
                "the number at byte {at} is outside PostgreSQL's numeric range (at most \
                 131072 digits before the decimal point and 16383 after it)"
            ),
            Unstorable::NulInText => write!(f, "a NUL character: PostgreSQL text cannot hold it"),
        }
    }
}

/// The first thing in `json` (valid JSON text) that `jsonb` cannot hold, if any: the
/// rules of PostgreSQL's JSON lexer (`\u0000` refused, a high surrogate escape must be
/// followed by a low one, a low one must follow a high one) and of `numeric` input. A
/// database encoding other than UTF-8 refuses more (any escape above 0x7F); queen_ack's
/// databases are UTF-8 (docs/operations.md).
pub fn jsonb_unstorable(json: &str) -> Option<Unstorable> {
    let b = json.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => match scan_string(b, i + 1) {
                Ok(end) => i = end,
                Err(u) => return Some(u),
            },
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                if !number_fits_numeric(&b[start..i]) {
                    return Some(Unstorable::Number { at: start });
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// A string's body from `i` (after its opening quote): the byte after its closing quote.
fn scan_string(b: &[u8], mut i: usize) -> Result<usize, Unstorable> {
    while i < b.len() {
        match b[i] {
            b'"' => return Ok(i + 1),
            b'\\' if b.get(i + 1) == Some(&b'u') => {
                let at = i;
                let cp = hex4(b, i + 2);
                i += 6;
                match cp {
                    Some(0) => return Err(Unstorable::Nul { at }),
                    Some(0xD800..=0xDBFF) => {
                        let low = if b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u') {
                            hex4(b, i + 2)
                        } else {
                            None
                        };
                        match low {
                            Some(0xDC00..=0xDFFF) => i += 6,
                            _ => return Err(Unstorable::LoneSurrogate { at }),
                        }
                    }
                    Some(0xDC00..=0xDFFF) => return Err(Unstorable::LoneSurrogate { at }),
                    _ => {}
                }
            }
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    Ok(i)
}

fn hex4(b: &[u8], i: usize) -> Option<u32> {
    let h = std::str::from_utf8(b.get(i..i + 4)?).ok()?;
    u32::from_str_radix(h, 16).ok()
}

/// Whether a JSON number token is a PostgreSQL `numeric` (numeric.c's `set_var_from_str`
/// and `make_result`): an exponent below 2^30 in size, at most 16383 digits after the
/// point (the display scale, exponent applied), and the first non-zero digit's base-10000
/// weight at most 32767 (a zero has weight 0).
fn number_fits_numeric(tok: &[u8]) -> bool {
    let tok = tok.strip_prefix(b"-").unwrap_or(tok);
    let int_len = tok.iter().take_while(|c| c.is_ascii_digit()).count();
    let rest = &tok[int_len..];
    let (frac, rest) = match rest.strip_prefix(b".") {
        Some(r) => {
            let n = r.iter().take_while(|c| c.is_ascii_digit()).count();
            (&r[..n], &r[n..])
        }
        None => (&rest[..0], rest),
    };
    const LIMIT: i64 = (i32::MAX / 2) as i64;
    let exp: i64 = match rest.first() {
        Some(b'e' | b'E') => {
            let e = &rest[1..];
            let (neg, digits) = match e.first() {
                Some(b'-') => (true, &e[1..]),
                Some(b'+') => (false, &e[1..]),
                _ => (false, e),
            };
            let mut v: i64 = 0;
            for d in digits {
                v = (v * 10 + i64::from(d - b'0')).min(LIMIT);
            }
            if v >= LIMIT {
                return false;
            }
            if neg {
                -v
            } else {
                v
            }
        }
        _ => 0,
    };
    let dscale = (frac.len() as i64 - exp).max(0);
    if dscale > 0x3FFF {
        return false;
    }
    let digits = tok[..int_len].iter().chain(frac.iter());
    let Some(first) = digits.clone().position(|&d| d != b'0') else {
        return true;
    };
    // The decimal weight of the first non-zero digit, then its base-10000 weight.
    let dweight = int_len as i64 - 1 + exp - first as i64;
    dweight.div_euclid(4) <= i64::from(i16::MAX)
}

/// Why a payload is refused at a write (every broker write path; docs/http-api.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not UTF-8: valid up to this byte.
    NotUtf8 { valid_up_to: usize },
    /// Not one JSON document (serde's reason).
    NotJson(String),
    /// JSON that PostgreSQL cannot hold.
    Unstorable(Unstorable),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotUtf8 { valid_up_to } => write!(
                f,
                "payload is not UTF-8 (an invalid byte at {valid_up_to}): a payload is one JSON document"
            ),
            Refusal::NotJson(e) => write!(f, "payload is not one JSON document: {e}"),
            Refusal::Unstorable(u) => write!(f, "payload cannot be stored: {u}"),
        }
    }
}

/// The write rule of a payload a client sends: empty (JSON null), or one JSON document in
/// UTF-8 that `jsonb` can hold, so that every reader gets back exactly what was written.
pub fn check_write(payload: &[u8]) -> Result<(), Refusal> {
    if payload.is_empty() {
        return Ok(());
    }
    let text = std::str::from_utf8(payload).map_err(|e| Refusal::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    serde_json::from_str::<&RawValue>(text).map_err(|e| Refusal::NotJson(e.to_string()))?;
    jsonb_unstorable(text).map_or(Ok(()), |u| Err(Refusal::Unstorable(u)))
}

/// A text field of a message (transactionId, producer subject): no NUL character.
pub fn check_text(s: &str) -> Result<(), Unstorable> {
    if s.contains('\0') {
        return Err(Unstorable::NulInText);
    }
    Ok(())
}

/// The extension's rule for a frame it is asked to store (whoever encoded it): its text
/// fields hold no NUL, and a payload that is JSON text is one `jsonb` can hold. Payloads
/// that are not JSON text (another producer's bytes, a sealed envelope) keep the reader
/// rule above; a frame flagged encrypted is opaque.
pub fn check_frame(f: &Frame) -> Result<(), Unstorable> {
    check_text(&f.transaction_id)?;
    if let Some(s) = &f.producer_sub {
        check_text(s)?;
    }
    if f.encrypted {
        return Ok(());
    }
    match std::str::from_utf8(&f.payload) {
        Ok(text) if serde_json::from_str::<&RawValue>(text).is_ok() => {
            jsonb_unstorable(text).map_or(Ok(()), Err)
        }
        _ => Ok(()),
    }
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
    fn json_jsonb_cannot_hold_becomes_a_json_string_of_its_text() {
        let nul = r#"{"payload":"a\u0000b"}"#;
        assert_eq!(
            json_text_of(nul.as_bytes()),
            r#""{\"payload\":\"a\\u0000b\"}""#
        );
        assert_eq!(json_text_of(br#""\ud800""#), r#""\"\\ud800\"""#);
        assert_eq!(json_text_of(b"1e200000"), r#""1e200000""#);
        // What jsonb holds stays verbatim.
        assert_eq!(
            json_text_of(br#""\ud83d\ude00 \u0001""#),
            r#""\ud83d\ude00 \u0001""#
        );
    }

    /// Each case as PostgreSQL 15 answers `'<case>'::jsonb` (checked by hand).
    #[test]
    fn jsonb_unstorable_finds_nul_surrogates_and_numbers() {
        let u = |s: &str| jsonb_unstorable(s);
        assert_eq!(u(r#""a\u0000b""#), Some(Unstorable::Nul { at: 2 }));
        assert_eq!(u(r#"{"k\u0000":1}"#), Some(Unstorable::Nul { at: 3 }));
        assert_eq!(
            u(r#"[{"a":["\\u0000"]}]"#),
            None,
            "an escaped backslash, then text"
        );
        assert_eq!(
            u(r#"[{"a":["x\\\u0000"]}]"#),
            Some(Unstorable::Nul { at: 11 })
        );
        assert_eq!(u(r#""\ud800""#), Some(Unstorable::LoneSurrogate { at: 1 }));
        assert_eq!(u(r#""\udc00""#), Some(Unstorable::LoneSurrogate { at: 1 }));
        assert_eq!(
            u(r#""\ud800\ud800""#),
            Some(Unstorable::LoneSurrogate { at: 1 })
        );
        assert_eq!(u(r#""\ud800x""#), Some(Unstorable::LoneSurrogate { at: 1 }));
        assert_eq!(u(r#""\uD83D\uDE00""#), None);
        assert_eq!(u(r#""\u0000"#), Some(Unstorable::Nul { at: 1 }));
        for ok in [
            "0",
            "-0",
            "-0.0",
            "1e400",
            "1E-16383",
            "123456789012345678901234567890",
            "1e131071",
            "9.99e131071",
            "0e999999999",
            "0.5e-16382",
            "1.5e-16382",
            "-12.5E+3",
            "true",
            "null",
            r#""1e999999""#,
            "0e1073741822",
            "10e131070",
            "9999e131068",
            "0.1e131072",
        ] {
            assert_eq!(u(ok), None, "{ok}");
        }
        for bad in [
            "1e131072",
            "1e-16384",
            "0e-16384",
            "0.5e-16383",
            "1e1073741823",
            "1e99999999999999999999",
            "-1e-1073741823",
            "0.0e-16383",
            "99999e131068",
        ] {
            assert_eq!(u(bad), Some(Unstorable::Number { at: 0 }), "{bad}");
        }
        let long_frac = format!("0.{}", "1".repeat(16384));
        assert_eq!(u(&long_frac), Some(Unstorable::Number { at: 0 }));
        assert_eq!(u(&format!("[1, {}]", &long_frac[..16385])), None);
    }

    #[test]
    fn check_write_refuses_what_does_not_round_trip() {
        assert_eq!(check_write(b""), Ok(()));
        assert_eq!(check_write(br#"{"a":[1,"\u00e9"]}"#), Ok(()));
        assert_eq!(
            check_write(b"\"\xff\xfe\""),
            Err(Refusal::NotUtf8 { valid_up_to: 1 })
        );
        assert!(matches!(check_write(b"nope"), Err(Refusal::NotJson(_))));
        assert!(matches!(
            check_write(br#"{"p":"\u0000"}"#),
            Err(Refusal::Unstorable(_))
        ));
    }

    #[test]
    fn check_frame_refuses_unstorable_json_and_nul_ids_only() {
        let f = |txn: &str, payload: &[u8]| Frame {
            message_id: [0; 16],
            trace_id: None,
            transaction_id: txn.into(),
            producer_sub: None,
            encrypted: false,
            payload: payload.to_vec(),
        };
        assert_eq!(check_frame(&f("t", b"not json \\u0000")), Ok(()));
        assert_eq!(check_frame(&f("t", &[0xff, 0])), Ok(()));
        assert_eq!(
            check_frame(&f("t", br#""\u0000""#)),
            Err(Unstorable::Nul { at: 1 })
        );
        assert_eq!(check_frame(&f("t\0", b"1")), Err(Unstorable::NulInText));
    }

    #[test]
    fn every_rendering_parses() {
        for p in [&b""[..], b"1", b"x", &[0xc3, 0x28], b"[1,2"] {
            let v: serde_json::Value = serde_json::from_str(&json_text_of(p)).unwrap();
            assert!(!v.is_object());
        }
    }
}
