// nofp_rust: a call chain in a Rust release build (no frame pointers), for
// the unwinder's tests: main -> rust_a -> rust_b -> rust_leaf, the leaf
// burning CPU. Usage: nofp_rust [seconds]
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn rust_leaf(mut seed: u64) -> u64 {
    for _ in 0..200_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
    }
    black_box(seed)
}

#[inline(never)]
fn rust_b(seed: u64) -> u64 {
    let v: Vec<u64> = (0..8).map(|i| seed.wrapping_add(i)).collect();
    rust_leaf(black_box(v[(seed & 7) as usize])).wrapping_add(v[3])
}

#[inline(never)]
fn rust_a(seed: u64) -> u64 {
    rust_b(seed.wrapping_mul(3)) ^ 5
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    println!("{}", std::process::id());
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut acc = 0u64;
    let mut seed = 1u64;
    while Instant::now() < end {
        acc = acc.wrapping_add(rust_a(seed));
        seed += 1;
    }
    black_box(acc);
}
