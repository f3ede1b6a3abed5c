//! Fallback fuzz loop: seeded, bounded, mutation-based. Exit code 0 = no property broke
//! (a broken property panics with the input in hex).

use queen_log::frame::{encode_frame, Frame};
use queen_log::segment::encode_segment;

#[path = "../../src/checks.rs"]
mod checks;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn valid_frames(r: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..r.below(5) {
        let f = Frame {
            message_id: [i as u8; 16],
            trace_id: (r.below(2) == 0).then_some([7; 16]),
            transaction_id: "t".repeat(r.below(40)),
            producer_sub: (r.below(2) == 0).then(|| "sub".into()),
            encrypted: r.below(4) == 0,
            payload: br#"{"k":[1,2,3]}"#[..r.below(14)].to_vec(),
        };
        encode_frame(&f, &mut out).unwrap();
    }
    out
}

fn mutate(r: &mut Rng, mut d: Vec<u8>) -> Vec<u8> {
    for _ in 0..r.below(4) {
        match r.below(5) {
            0 if !d.is_empty() => {
                let i = r.below(d.len());
                d[i] = r.next() as u8;
            }
            1 if !d.is_empty() => d.truncate(r.below(d.len())),
            2 => d.push(r.next() as u8),
            3 if !d.is_empty() => {
                let i = r.below(d.len());
                d[i] ^= 1 << r.below(8);
            }
            _ => {
                let i = r.below(d.len() + 1);
                d.splice(i..i, (r.next() as u32).to_le_bytes());
            }
        }
    }
    d
}

fn check_all(d: &[u8]) {
    let res = std::panic::catch_unwind(|| {
        checks::frame_decode(d);
        checks::segment_decode(d);
        checks::hash_parse(d);
    });
    if res.is_err() {
        eprintln!("property broken on input (hex): {}", queen_log::hash::hash_hex(d));
        std::process::exit(1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(6) | 1;
    let mut r = Rng(seed);
    let hex = b"0123456789abcdefABCDEFxg ";
    for i in 0..iters {
        let d = match i % 4 {
            0 => (0..r.below(64)).map(|_| r.next() as u8).collect(),
            1 => {
                let v = valid_frames(&mut r);
                mutate(&mut r, v)
            }
            2 => {
                let frames = queen_log::frame::decode_frames(&valid_frames(&mut r)).unwrap();
                let blob = encode_segment(&frames).unwrap();
                mutate(&mut r, blob)
            }
            _ => (0..30 + r.below(5)).map(|_| hex[r.below(hex.len())]).collect(),
        };
        check_all(&d);
    }
    println!("fallback fuzz: {iters} inputs, seed {seed}: no property broken");
}
