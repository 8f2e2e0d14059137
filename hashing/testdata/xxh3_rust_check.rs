// Helper for gen_vectors.py --rust: reads "SEED HEXDATA" lines on stdin and
// prints xxhash_rust::xxh3::xxh3_64_with_seed of each, one per line. It lets
// the generator check libxxhash (python3-xxhash) against xxhash-rust, the
// crate Dynamo's kv-router hashes with. Not part of the Go build.
use std::io::{self, BufRead, Write};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn main() {
    let stdin = io::stdin();
    let mut out = io::BufWriter::new(io::stdout());
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        let mut parts = line.splitn(2, ' ');
        let seed: u64 = parts.next().unwrap().parse().expect("seed");
        let data = unhex(parts.next().unwrap_or(""));
        writeln!(out, "{}", xxhash_rust::xxh3::xxh3_64_with_seed(&data, seed)).unwrap();
    }
}
