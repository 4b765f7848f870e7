//! The vectorised per-digi checks of the validation ([`super::validate_digis`]): the range
//! check of a piece as one branch-free pass over its u16 columns with an OR-reduced flag (the
//! exact error is then located by the digi-by-digi pass), and the module runs of an event's
//! stretch found from a bit mask of the positions where the module id changes. Compiled
//! twice on x86-64, for the baseline and for AVX2 (chosen at run time): the baseline's SSE2
//! has no unsigned 16-bit compare and handles 8 lanes, AVX2 16.

use detkit_gpu::clustering::INVALID_MODULE;

use super::{Geometry, Run};

/// Lanes per step of the branch-free loops.
const LANES: usize = 32;

/// The largest valid module id, row and column as u16 (every side is at least 1 and the
/// module count at most [`INVALID_MODULE`]: [`Geometry::check`]).
fn limits(geometry: &Geometry) -> [u16; 3] {
    [geometry.modules, geometry.rows, geometry.cols]
        .map(|v| v.saturating_sub(1).min(u16::MAX as u32) as u16)
}

/// Whether some digi of `m`, `x`, `y` (equal lengths) is out of range: a valid module id
/// (not [`INVALID_MODULE`]) at or past the geometry's count, or its pixel outside the module.
pub(super) fn range_bad(m: &[u16], x: &[u16], y: &[u16], geometry: &Geometry) -> bool {
    let lim = limits(geometry);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { range_bad_avx2(m, x, y, lim) };
    }
    range_bad_body(m, x, y, lim)
}

/// [`range_bad`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn range_bad_avx2(m: &[u16], x: &[u16], y: &[u16], lim: [u16; 3]) -> bool {
    range_bad_body(m, x, y, lim)
}

#[inline(always)]
fn bad_one(m: u16, x: u16, y: u16, [lm, lx, ly]: [u16; 3]) -> bool {
    (m != INVALID_MODULE) & ((m > lm) | (x > lx) | (y > ly))
}

#[inline(always)]
fn range_bad_body(m: &[u16], x: &[u16], y: &[u16], lim: [u16; 3]) -> bool {
    let n = m.len().min(x.len()).min(y.len());
    let (m, x, y) = (&m[..n], &x[..n], &y[..n]);
    let mut acc = [0u16; LANES];
    let (mc, mt) = m.as_chunks::<LANES>();
    let (xc, xt) = x.as_chunks::<LANES>();
    let (yc, yt) = y.as_chunks::<LANES>();
    for ((mc, xc), yc) in mc.iter().zip(xc).zip(yc) {
        for j in 0..LANES {
            acc[j] |= bad_one(mc[j], xc[j], yc[j], lim) as u16;
        }
    }
    let tail = mt
        .iter()
        .zip(xt)
        .zip(yt)
        .fold(false, |b, ((&m, &x), &y)| b | bad_one(m, x, y, lim));
    tail | (acc.iter().fold(0, |a, &b| a | b) != 0)
}

/// Appends to `runs` the module runs of `ms`, a stretch of one event's module ids whose
/// first digi is digi `start` of the call (a run starts at each valid digi whose module
/// differs from the last valid one's in the stretch; none yet at its start).
pub(super) fn push_runs(ms: &[u16], start: usize, event: u32, runs: &mut Vec<Run>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { push_runs_avx2(ms, start, event, runs) };
    }
    push_runs_body(ms, start, event, runs)
}

/// [`push_runs`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn push_runs_avx2(ms: &[u16], start: usize, event: u32, runs: &mut Vec<Run>) {
    push_runs_body(ms, start, event, runs)
}

/// Bit `j` set where `cur[j] != prev[j]`.
#[inline(always)]
fn change_mask(prev: &[u16; LANES], cur: &[u16; LANES]) -> u32 {
    let mut mask = 0u32;
    for j in 0..LANES {
        mask |= ((cur[j] != prev[j]) as u32) << j;
    }
    mask
}

#[inline(always)]
fn push_runs_body(ms: &[u16], start: usize, event: u32, runs: &mut Vec<Run>) {
    if ms.is_empty() {
        return;
    }
    // A run can start only where the module id differs from the digi before (an invalid
    // digi in between differs from both its neighbours): only those positions are visited.
    let mut current = u32::MAX;
    let mut visit = |i: usize, current: &mut u32| {
        let m = ms[i];
        if m != INVALID_MODULE && m as u32 != *current {
            runs.push(Run {
                module: m,
                event,
                start: (start + i) as u32,
            });
            *current = m as u32;
        }
    };
    visit(0, &mut current);
    let mut i = 1;
    while i + LANES <= ms.len() {
        let prev: &[u16; LANES] = ms[i - 1..i - 1 + LANES].try_into().expect("LANES");
        let cur: &[u16; LANES] = ms[i..i + LANES].try_into().expect("LANES");
        let mut mask = change_mask(prev, cur);
        while mask != 0 {
            visit(i + mask.trailing_zeros() as usize, &mut current);
            mask &= mask - 1;
        }
        i += LANES;
    }
    for k in i..ms.len() {
        if ms[k] != ms[k - 1] {
            visit(k, &mut current);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clustering::ChargeCut;
    use rand::Rng as _;

    fn geometry() -> Geometry {
        Geometry::custom(40, 64, 80, ChargeCut::uniform(0)).unwrap()
    }

    /// The scalar reference of [`range_bad`].
    fn range_bad_ref(m: &[u16], x: &[u16], y: &[u16], g: &Geometry) -> bool {
        (0..m.len()).any(|i| {
            m[i] != INVALID_MODULE
                && (m[i] as u32 >= g.modules || x[i] as u32 >= g.rows || y[i] as u32 >= g.cols)
        })
    }

    /// The scalar reference of [`push_runs`].
    fn runs_ref(ms: &[u16], start: usize, event: u32) -> Vec<(u16, u32, u32)> {
        let mut out = Vec::new();
        let mut current = None;
        for (i, &m) in ms.iter().enumerate() {
            if m != INVALID_MODULE && current != Some(m) {
                out.push((m, event, (start + i) as u32));
                current = Some(m);
            }
        }
        out
    }

    /// One bad value in each column at every position (the first digi, every lane of a
    /// chunk, the last lane, the tail) is found; at the limits it is not; an invalid digi's
    /// pixel is not checked.
    #[test]
    fn range_check_finds_every_position_and_column() {
        let g = geometry();
        for n in [0usize, 1, 7, 31, 32, 33, 63, 64, 65, 100, 2048 + 17] {
            let m = vec![39u16; n];
            let x = vec![63u16; n];
            let y = vec![79u16; n];
            assert!(!range_bad(&m, &x, &y, &g), "n {n}: clean at the limits");
            for p in 0..n {
                for col in 0..3 {
                    let (mut m, mut x, mut y) = (m.clone(), x.clone(), y.clone());
                    match col {
                        0 => m[p] = 40,
                        1 => x[p] = 64,
                        _ => y[p] = u16::MAX,
                    }
                    assert!(range_bad(&m, &x, &y, &g), "n {n}, digi {p}, column {col}");
                    assert!(range_bad_ref(&m, &x, &y, &g));
                    if col > 0 {
                        m[p] = INVALID_MODULE;
                        assert!(!range_bad(&m, &x, &y, &g), "n {n}, invalid digi {p}");
                    }
                }
            }
        }
        // Module ids past the count but below the invalid mark, and u16::MAX.
        for bad in [40u16, 1000, INVALID_MODULE - 1, u16::MAX] {
            let mut m = vec![0u16; 45];
            m[44] = bad;
            assert!(range_bad(&m, &[0; 45], &[0; 45], &g), "module {bad}");
        }
    }

    /// Runs equal the scalar pass's on random module sequences (short runs, invalid digis,
    /// changes at lane 0, at lane 31 and in the tail), for every length up to a few chunks.
    #[test]
    fn runs_equal_the_scalar_pass() {
        let mut r = crate::rng::rng(11);
        for case in 0..400 {
            let n = r.random_range(0..200);
            let ms: Vec<u16> = {
                let mut v = Vec::with_capacity(n);
                while v.len() < n {
                    let m = if r.random_range(0..8) == 0 {
                        INVALID_MODULE
                    } else {
                        r.random_range(0..6)
                    };
                    let len = r.random_range(1..(1 + [1, 3, 40][case % 3]));
                    v.extend(std::iter::repeat_n(m, len));
                }
                v.truncate(n);
                v
            };
            let mut runs = Vec::new();
            push_runs(&ms, 1000, 3, &mut runs);
            let got: Vec<_> = runs.iter().map(|r| (r.module, r.event, r.start)).collect();
            assert_eq!(got, runs_ref(&ms, 1000, 3), "case {case}: {ms:?}");
        }
        // A change exactly at each position of a 97-digi stretch.
        for p in 0..97 {
            let mut ms = vec![5u16; 97];
            ms[p..].fill(6);
            let mut runs = Vec::new();
            push_runs(&ms, 0, 0, &mut runs);
            let got: Vec<_> = runs.iter().map(|r| (r.module, r.event, r.start)).collect();
            assert_eq!(got, runs_ref(&ms, 0, 0), "change at {p}");
        }
    }
}
