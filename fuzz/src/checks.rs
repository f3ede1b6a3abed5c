#![allow(dead_code)]
//! The properties every fuzz driver checks (shared by the libFuzzer targets and the
//! plain-Rust fallback loop through `#[path]` includes). Each function must never panic
//! on any input except through a violated assertion, which is a bug.

use queen_log::frame::{decode_frames, encode_frame};
use queen_log::hash::{hash_hex, join_hashes, parse_hash_hex, split_hashes};
use queen_log::segment::{decode_segment, encode_segment};

/// decode_frames: never panics; whatever decodes re-encodes to the very same bytes
/// (the format has exactly one encoding per frame list) and decodes again identically.
pub fn frame_decode(data: &[u8]) {
    if let Ok(frames) = decode_frames(data) {
        let mut out = Vec::with_capacity(data.len());
        for f in &frames {
            encode_frame(f, &mut out).expect("a decoded frame must re-encode");
            let _ = f.payload_json();
        }
        assert_eq!(out.as_slice(), data, "re-encoding a decoded frame stream changed it");
        assert_eq!(decode_frames(&out).expect("re-decode"), frames);
    }
}

/// decode_segment: never panics, never allocates without bound (capped decompression);
/// a decoded segment re-encodes into a blob that decodes to the same frames.
pub fn segment_decode(data: &[u8]) {
    if let Ok(frames) = decode_segment(data) {
        let blob = encode_segment(&frames).expect("decoded frames must re-encode");
        assert_eq!(decode_segment(&blob).expect("re-decode"), frames);
    }
    // The same bytes as a raw frame stream inside a real zstd frame: exercises the frame
    // decoder behind the decompressor; both paths must agree exactly.
    if data.len() <= 1 << 16 {
        let blob = zstd::bulk::compress(data, 1).expect("zstd compress");
        assert_eq!(decode_segment(&blob), decode_frames(data), "segment and frame decoders disagree");
    }
}

/// parse_hash_hex / split_hashes: never panic; accepted tokens are exactly 32 hex
/// characters and render back to their lowercase form; split/join round-trips.
pub fn hash_parse(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(h) = parse_hash_hex(s) {
            assert_eq!(s.len(), 32, "accepted a token that is not 32 ASCII characters: {s:?}");
            assert_eq!(hash_hex(&h), s.to_ascii_lowercase());
            assert_eq!(parse_hash_hex(&hash_hex(&h)).expect("own rendering parses"), h);
        }
    }
    match split_hashes(data) {
        Ok(hs) => {
            assert_eq!(data.len() % 16, 0);
            assert_eq!(hs.len(), data.len() / 16);
            assert_eq!(join_hashes(&hs), data);
        }
        Err(_) => assert_ne!(data.len() % 16, 0, "a multiple of 16 bytes was refused"),
    }
}
