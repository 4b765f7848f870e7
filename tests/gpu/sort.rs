//! GPU tests of the radix sort against its CPU oracle: `u32` and `u64` keys, bit ranges,
//! descending, pairs (values checked for stability: each value is its key's input index),
//! 8/12/16-byte payloads, adversarial keys, every size class (0, 1, warp ± 1, single tile
//! ± 1, onesweep tile ± 1, several tiles; 2^20 + 7 and 2^26 without `--quick`, 40 tiles + 3
//! with it, for the sanitizer runs), poisoned outputs with one element past `n` that must
//! stay untouched, and the launch count. In the sanitizer mode (`Ctx::sanitize`) every size,
//! bit range and input kind still runs, but one in six of their combinations (each with
//! one of the two orders), the argsort after every other pairs sort, and the 40-tile size
//! with the full bit range only.

use detkit::sort::{cpu, launches_for, SortKey, SortOptions};
use detkit::Error;
use detkit_gpu::sort as ks;
use detkit_tests::{ensure, exact};

use crate::{e, Ctx, Test, R};

/// The sort tests, run by `main` after the other families' (names start `radix_sort`, so
/// that `gpu-tests radix_sort` selects them and not the PET time sort's).
pub(crate) const TESTS: &[Test] = &[
    ("radix_sort_keys_u32", test_keys_u32),
    ("radix_sort_keys_u64", test_keys_u64),
    ("radix_sort_pairs_u32", test_pairs_u32),
    ("radix_sort_pairs_u64", test_pairs_u64),
    ("radix_sort_payloads", test_payloads),
    ("radix_sort_reuse", test_reuse),
    ("radix_sort_errors", test_errors),
];

const POISON32: u32 = 0xDEAD_BEEF;
const POISON64: u64 = 0xDEAD_BEEF_DEAD_BEEF;

/// Sizes around every boundary of the sort for `key_bytes`/`value_bytes`.
fn sizes(key_bytes: usize, value_bytes: usize, quick: bool) -> Vec<usize> {
    let single = ks::SINGLE_TILE as usize;
    let tile = ks::onesweep_tile(key_bytes, value_bytes) as usize;
    let mut v = vec![
        0,
        1,
        31,
        32,
        33,
        single - 1,
        single,
        single + 1,
        tile - 1,
        tile,
        tile + 1,
        3 * tile + 5,
    ];
    if quick {
        // Sanitizer runs (racecheck takes minutes per million keys): many tiles, so that
        // blocks look back over several predecessors, at a size the tools finish.
        v.push(40 * tile + 3);
    } else {
        v.extend([(1 << 20) + 7, 1 << 26]);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// A key type under test: random generation from the test seed, and its poison.
trait TestKey: SortKey + cudarc::driver::DeviceRepr {
    const POISON: Self;
    fn from_u64(x: u64) -> Self;
}
impl TestKey for u32 {
    const POISON: Self = POISON32;
    fn from_u64(x: u64) -> Self {
        x as u32
    }
}
impl TestKey for u64 {
    const POISON: Self = POISON64;
    fn from_u64(x: u64) -> Self {
        x
    }
}

fn random_u64(c: &Ctx, salt: u64, n: usize) -> Vec<u64> {
    let a = c.rand_u32(salt, n);
    let b = c.rand_u32(salt ^ 0x5555, n);
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| (x as u64) << 32 | y as u64)
        .collect()
}

/// Adversarial and random keys for the bit range `begin..end`.
fn inputs<K: TestKey>(c: &Ctx, n: usize, begin: u32, end: u32) -> Vec<(&'static str, Vec<K>)> {
    let r = random_u64(c, 40 + begin as u64 * 64 + end as u64, n);
    let range_mask = if end - begin == 64 {
        u64::MAX
    } else {
        ((1u64 << (end - begin)) - 1) << begin
    };
    let keys = |f: &dyn Fn(usize, u64) -> u64| -> Vec<K> {
        r.iter()
            .enumerate()
            .map(|(i, &x)| K::from_u64(f(i, x)))
            .collect()
    };
    let mut v: Vec<(&'static str, Vec<K>)> = vec![("random", keys(&|_, x| x))];
    // The largest sizes take random keys only; with --quick (the sanitizer runs: racecheck
    // took 47-243 s per group) so do sizes from 2^16, the 40 tiles + 3 included: the
    // adversarial keys still cover one and several tiles, and the random keys the look-back
    // over more than a warp of predecessors.
    if n >= 1 << 26 || (c.quick && n >= 1 << 16) {
        return v;
    }
    let konst = r.first().copied().unwrap_or(7);
    let mut sorted = keys(&|_, x| x);
    sorted.sort_by_key(|k| cpu::order_key(*k, &SortOptions::bits(begin, end)));
    let mut reverse = sorted.clone();
    reverse.reverse();
    v.extend([
        ("all-equal", keys(&|_, _| konst)),
        ("sorted", sorted),
        ("reverse", reverse),
        // Only the top bit of the range differs; every other bit is the same constant.
        (
            "top-bit",
            keys(&|_, x| konst & !(1u64 << (end - 1)) | (x & 1) << (end - 1)),
        ),
        // Only the lowest bit of the range differs.
        (
            "low-bit",
            keys(&|_, x| konst & !(1u64 << begin) | (x & 1) << begin),
        ),
        // Random bits outside the range, three values inside: the order must ignore the
        // outside bits and keep them in the output; many equal keys test stability.
        (
            "outside",
            keys(&|_, x| x & !range_mask | ((x >> 7) % 3) << begin & range_mask),
        ),
        // Sorted-ish timestamps: slowly rising, the top digits constant over long runs.
        ("timestamps", keys(&|i, x| (i as u64) << 12 | (x & 0xfff))),
    ]);
    v
}

fn ranges<K: SortKey>() -> Vec<(u32, u32)> {
    if K::BITS == 32 {
        vec![(0, 32), (5, 29), (8, 16), (31, 32)]
    } else {
        vec![(0, 64), (0, 48), (13, 50), (40, 64), (0, 32)]
    }
}

/// Keys only: device sort into a poisoned output against the oracle.
fn keys_case<K: TestKey>(c: &Ctx) -> R {
    let g = c.gpu();
    let kb = std::mem::size_of::<K>();
    for (si, n) in sizes(kb, 0, c.quick).into_iter().enumerate() {
        for (ri, (begin, end)) in ranges::<K>().into_iter().enumerate() {
            if n >= 1 << 26 && (begin, end) != (0, K::BITS) || c.sanitize && n >= 1 << 16 && ri != 0
            {
                continue;
            }
            for (ii, (label, keys)) in inputs::<K>(c, n, begin, end).into_iter().enumerate() {
                // The 40-tile size (random keys, full range) once, ascending.
                let run = |d: usize| c.keep(si + ri + ii + d, 6) || n >= 1 << 16 && d == 0;
                if !(0..2).any(run) {
                    continue;
                }
                let d_in = if n == 0 {
                    g.zeros::<K>(1).map_err(e)?
                } else {
                    g.upload(&keys).map_err(e)?
                };
                for (d, descending) in [false, true].into_iter().enumerate() {
                    if n >= 1 << 26 && descending || !run(d) {
                        continue;
                    }
                    let opts = SortOptions {
                        begin_bit: begin,
                        end_bit: Some(end),
                        descending,
                    };
                    let what = format!(
                        "sort_keys_u{} {label} n={n} bits {begin}..{end} desc={descending}",
                        kb * 8
                    );
                    let mut d_out = g.poisoned(n + 1, K::POISON).map_err(e)?;
                    let before = g.sort_launches();
                    g.sort_keys_device(&d_in, &mut d_out, n, opts)
                        .map_err(|x| format!("{what}: {x}"))?;
                    let launches = g.sort_launches() - before;
                    let want_launches = launches_for::<K>(n, &opts).map_err(e)?;
                    ensure(launches == want_launches, || {
                        format!("{what}: {launches} launches, expected {want_launches}")
                    })?;
                    let got = g.download(&d_out).map_err(e)?;
                    let mut want = cpu::sort_keys(&keys, &opts);
                    want.push(K::POISON);
                    exact(&what, &got, &want)?;
                }
            }
        }
    }
    Ok(())
}

/// Pairs with each key's input index as its value: the values show stability exactly.
fn pairs_case<K: TestKey>(c: &Ctx) -> R {
    let g = c.gpu();
    let kb = std::mem::size_of::<K>();
    for (si, n) in sizes(kb, 4, c.quick).into_iter().enumerate() {
        for (ri, (begin, end)) in ranges::<K>().into_iter().enumerate() {
            // 2^26 once, with the full bit range (every range, 48 bits included, runs at
            // 2^20 + 7 with every input kind): one huge sort per key type, not two.
            if n >= 1 << 26 && (begin, end) != (0, K::BITS) || c.sanitize && n >= 1 << 16 && ri != 0
            {
                continue;
            }
            for (ii, (label, keys)) in inputs::<K>(c, n, begin, end).into_iter().enumerate() {
                // The 40-tile size (random keys, full range) once, ascending.
                let run = |d: usize| c.keep(si + ri + ii + d, 6) || n >= 1 << 16 && d == 0;
                if !(0..2).any(run) {
                    continue;
                }
                let idx: Vec<u32> = (0..n as u32).collect();
                let (d_k, d_v) = if n == 0 {
                    (g.zeros::<K>(1).map_err(e)?, g.zeros::<u32>(1).map_err(e)?)
                } else {
                    (g.upload(&keys).map_err(e)?, g.upload(&idx).map_err(e)?)
                };
                for (d, descending) in [false, true].into_iter().enumerate() {
                    if n >= 1 << 26 && descending || !run(d) {
                        continue;
                    }
                    let opts = SortOptions {
                        begin_bit: begin,
                        end_bit: Some(end),
                        descending,
                    };
                    let what = format!(
                        "sort_pairs_u{} {label} n={n} bits {begin}..{end} desc={descending}",
                        kb * 8
                    );
                    let mut k_out = g.poisoned(n + 1, K::POISON).map_err(e)?;
                    let mut v_out = g.poisoned(n + 1, POISON32).map_err(e)?;
                    let before = g.sort_launches();
                    g.sort_pairs_device(&d_k, &mut k_out, &d_v, &mut v_out, n, opts)
                        .map_err(|x| format!("{what}: {x}"))?;
                    let launches = g.sort_launches() - before;
                    let want_launches = launches_for::<K>(n, &opts).map_err(e)?;
                    ensure(launches == want_launches, || {
                        format!("{what}: {launches} launches, expected {want_launches}")
                    })?;
                    let (mut wk, mut wv) = cpu::sort_pairs(&keys, &idx, &opts);
                    wk.push(K::POISON);
                    wv.push(POISON32);
                    exact(
                        &format!("{what} keys"),
                        &g.download(&k_out).map_err(e)?,
                        &wk,
                    )?;
                    exact(
                        &format!("{what} values"),
                        &g.download(&v_out).map_err(e)?,
                        &wv,
                    )?;
                    // The argsort (no index array read) gives the same keys and, as values,
                    // the same indices.
                    if !c.keep(si + ri + ii + d, 12) {
                        continue;
                    }
                    let mut k_arg = g.poisoned(n + 1, K::POISON).map_err(e)?;
                    let mut i_arg = g.poisoned(n + 1, POISON32).map_err(e)?;
                    g.sort_index_device(&d_k, &mut k_arg, &mut i_arg, n, opts)
                        .map_err(|x| format!("{what} argsort: {x}"))?;
                    exact(
                        &format!("{what} argsort keys"),
                        &g.download(&k_arg).map_err(e)?,
                        &wk,
                    )?;
                    exact(
                        &format!("{what} argsort index"),
                        &g.download(&i_arg).map_err(e)?,
                        &wv,
                    )?;
                }
            }
        }
    }
    Ok(())
}

fn test_keys_u32(c: &Ctx) -> R {
    keys_case::<u32>(c)
}

fn test_keys_u64(c: &Ctx) -> R {
    keys_case::<u64>(c)
}

fn test_pairs_u32(c: &Ctx) -> R {
    pairs_case::<u32>(c)
}

fn test_pairs_u64(c: &Ctx) -> R {
    pairs_case::<u64>(c)
}

/// 8-, 12- and 16-byte payloads (each carries its input index, so stability shows) through
/// the `Backend` API, at every size class but 2^26.
fn test_payloads(c: &Ctx) -> R {
    let b = &c.backend;
    for (pi, (kb, vb)) in [(4, 8), (4, 12), (4, 16), (8, 8), (8, 12), (8, 16)]
        .into_iter()
        .enumerate()
    {
        for (si, n) in sizes(kb, vb, true).into_iter().enumerate() {
            if !c.keep(pi + si, 2) || c.sanitize && n >= 1 << 16 && pi % 3 != 0 {
                continue;
            }
            let r = random_u64(c, 90 + vb as u64, n);
            for (begin, end, descending) in [(0, 32, false), (3, 20, true)] {
                let opts = SortOptions {
                    begin_bit: begin,
                    end_bit: Some(end),
                    descending,
                };
                let what = format!("sort payload k{kb} v{vb} n={n} bits {begin}..{end}");
                // Few distinct keys: long runs of equal keys.
                let k32: Vec<u32> = r.iter().map(|&x| (x % 5) as u32 * 0x0101_0101).collect();
                let k64: Vec<u64> = r.iter().map(|&x| x % 5 * 0x0101_0101_0101).collect();
                let p8: Vec<[u32; 2]> = (0..n as u32).map(|i| [i, !i]).collect();
                let p12: Vec<[u32; 3]> = (0..n as u32).map(|i| [i, !i, i ^ 0x5a5a]).collect();
                let p16: Vec<[u32; 4]> = (0..n as u32).map(|i| [i, !i, i ^ 0x5a5a, 7]).collect();
                macro_rules! run {
                    ($keys:expr, $vals:expr) => {{
                        let got = b.sort_pairs(&$keys, &$vals, opts).map_err(e)?;
                        let want = cpu::sort_pairs(&$keys, &$vals, &opts);
                        exact(&format!("{what} keys"), &got.0, &want.0)?;
                        exact(&format!("{what} values"), &got.1, &want.1)?;
                    }};
                }
                match (kb, vb) {
                    (4, 8) => run!(k32, p8),
                    (4, 12) => run!(k32, p12),
                    (4, 16) => run!(k32, p16),
                    (8, 8) => run!(k64, p8),
                    (8, 12) => run!(k64, p12),
                    _ => run!(k64, p16),
                }
            }
        }
    }
    Ok(())
}

/// Calls of different sizes, key types and bit ranges back to back reuse the temporary
/// storage (look-back words of earlier passes must read as stale), including across the
/// wrap of the 31-bit pass epoch.
fn test_reuse(c: &Ctx) -> R {
    let g = c.gpu();
    // The sanitizer mode: an eighth of the sizes, still several onesweep tiles.
    let (m, k) = (c.big(1 << 20, 1 << 17), c.big(300_000, 37_500));
    let plan: &[(usize, bool, u32)] = &[
        (m, false, 32),
        (50_000, true, 48),
        (m, false, 17),
        (7_000, true, 64),
        (k, false, 32),
        (m, true, 40),
    ];
    for round in 0..2 {
        if round == 1 {
            // Force the epoch close to its limit: the next call must wrap and clear.
            g.sort_set_epoch(ks::MAX_EPOCH - 3);
        }
        for &(n, wide, end) in plan {
            let what = format!(
                "sort reuse round {round} n={n} u{} end {end}",
                if wide { 64 } else { 32 }
            );
            let opts = SortOptions::bits(0, end);
            let r = random_u64(c, 70 + n as u64, n);
            if wide {
                let d = g.upload(&r).map_err(e)?;
                let mut out = g.poisoned(n, POISON64).map_err(e)?;
                g.sort_keys_device(&d, &mut out, n, opts).map_err(e)?;
                exact(
                    &what,
                    &g.download(&out).map_err(e)?,
                    &cpu::sort_keys(&r, &opts),
                )?;
            } else {
                let k: Vec<u32> = r.iter().map(|&x| x as u32).collect();
                let d = g.upload(&k).map_err(e)?;
                let mut out = g.poisoned(n, POISON32).map_err(e)?;
                g.sort_keys_device(&d, &mut out, n, opts).map_err(e)?;
                exact(
                    &what,
                    &g.download(&out).map_err(e)?,
                    &cpu::sort_keys(&k, &opts),
                )?;
            }
        }
    }
    Ok(())
}

fn test_errors(c: &Ctx) -> R {
    let b = &c.backend;
    ensure(
        matches!(
            b.sort_keys_u32(&[3, 1], SortOptions::bits(0, 33)),
            Err(Error::InvalidInput { .. })
        ),
        || "end_bit 33 accepted for u32 keys".into(),
    )?;
    ensure(
        matches!(
            b.sort_keys_u64(&[3, 1], SortOptions::bits(10, 9)),
            Err(Error::InvalidInput { .. })
        ),
        || "begin_bit > end_bit accepted".into(),
    )?;
    ensure(
        matches!(
            b.sort_pairs_u32(&[3, 1], &[1u16, 2], SortOptions::default()),
            Err(Error::InvalidInput { .. })
        ),
        || "2-byte values accepted".into(),
    )?;
    // An empty range is the identity, bits and order untouched.
    let keys = c.rand_u32(99, 10_000);
    let got = b.sort_keys_u32(&keys, SortOptions::bits(9, 9)).map_err(e)?;
    exact("sort empty range", &got, &keys)
}
