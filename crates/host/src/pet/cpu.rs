//! Oracles of the PET chain: conversion, stable time sort, the sequential window rule with
//! GATE's multiple-coincidence policies. Plain sequential code; the CPU backend runs it.

use detkit_gpu::pet::{
    convert_frame, Coincidence, DataFrameV2, Policy, ScannerParams, Single, CONVERT_ACCEPTED,
    CONVERT_BAD_ADDRESS, CONVERT_CLAMPED, MAX_MULTIPLE,
};

use crate::error::{invalid, Error, Result};

/// Conversion statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Frames read.
    pub frames: u64,
    /// Singles accepted (inside the energy window).
    pub accepted: u64,
    /// Frames outside the energy window.
    pub rejected_energy: u64,
    /// Frames whose energy-table index `raw / 10` was 1000 or more, clamped to 999 (they are
    /// still converted and tested against the window).
    pub clamped: u64,
    /// Frames with a BDM, DU, x, y or position-table entry outside the scanner: dropped.
    pub bad_address: u64,
    /// Index of the first bad-address frame.
    pub first_bad_address: Option<u64>,
}

impl ConvertStats {
    /// Adds the statistics of a later chunk whose first frame is frame `offset`.
    pub fn add(&mut self, o: &ConvertStats, offset: u64) {
        self.frames += o.frames;
        self.accepted += o.accepted;
        self.rejected_energy += o.rejected_energy;
        self.clamped += o.clamped;
        self.bad_address += o.bad_address;
        if self.first_bad_address.is_none() {
            self.first_bad_address = o.first_bad_address.map(|i| i + offset);
        }
    }
}

/// Frames per piece of [`convert_par`].
pub const CONVERT_PIECE: usize = 1 << 16;

/// [`convert`] on every core: pieces of [`CONVERT_PIECE`] frames converted in parallel
/// (`rayon`) and joined in order, statistics added with each piece's frame offset, so the
/// result equals [`convert`]'s whatever the thread count (a test checks it). The CPU backend
/// and the benchmarks' oracle checks use it (2^26–2^28 frames).
pub fn convert_par(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
) -> (Vec<Single>, ConvertStats) {
    use rayon::prelude::*;
    let pieces: Vec<(Vec<Single>, ConvertStats)> = frames
        .par_chunks(CONVERT_PIECE)
        .map(|f| convert(f, p, position, energy))
        .collect();
    let mut out = Vec::with_capacity(pieces.iter().map(|(s, _)| s.len()).sum());
    let mut st = ConvertStats::default();
    for (k, (s, piece)) in pieces.iter().enumerate() {
        out.extend_from_slice(s);
        st.add(piece, (k * CONVERT_PIECE) as u64);
    }
    (out, st)
}

/// Converts every frame, keeps the accepted singles in input order.
pub fn convert(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
) -> (Vec<Single>, ConvertStats) {
    let mut out = Vec::new();
    let mut st = ConvertStats {
        frames: frames.len() as u64,
        ..Default::default()
    };
    for (i, f) in frames.iter().enumerate() {
        let (s, status) = convert_frame(f, p, |k| position[k as usize], |k| energy[k as usize]);
        if status & CONVERT_BAD_ADDRESS != 0 {
            st.bad_address += 1;
            st.first_bad_address.get_or_insert(i as u64);
            continue;
        }
        if status & CONVERT_CLAMPED != 0 {
            st.clamped += 1;
        }
        if status & CONVERT_ACCEPTED != 0 {
            st.accepted += 1;
            out.push(s);
        } else {
            st.rejected_energy += 1;
        }
    }
    (out, st)
}

/// The first single whose time is not finite, as a typed error.
pub fn check_times(singles: &[Single], what: &'static str) -> Result<()> {
    use rayon::prelude::*;
    // A branch-free pass per piece on every core; the first bad single is looked for only
    // when there is one.
    let bad = |c: &[Single]| c.iter().fold(false, |b, s| b | !s.time.is_finite());
    let any_bad = if singles.len() <= CHECK_PIECE {
        bad(singles)
    } else {
        singles.par_chunks(CHECK_PIECE).any(bad)
    };
    if !any_bad {
        return Ok(());
    }
    if let Some(i) = singles.iter().position(|s| !s.time.is_finite()) {
        return Err(invalid(
            what,
            format!(
                "single {i} has time {} (times must be finite)",
                singles[i].time
            ),
        ));
    }
    Ok(())
}

/// Singles per piece of the parallel checks.
const CHECK_PIECE: usize = 1 << 16;

/// Stable sort by time (ties keep input order). Non-finite times are a typed error.
/// `rayon`'s `par_sort_by` is a stable sort like `slice::sort_by`, on every core.
pub fn sort(singles: &[Single]) -> Result<Vec<Single>> {
    use rayon::prelude::*;
    check_times(singles, "singles to sort")?;
    let mut v = singles.to_vec();
    v.par_sort_by(|a, b| a.time.partial_cmp(&b.time).expect("finite"));
    Ok(v)
}

/// Coincidence settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoincideConfig {
    /// Window length `W` (time unit of the singles); a later single is in the window when
    /// `t - t_open <= W`.
    pub window: f64,
    /// Delayed window: `Some(D)` makes every single open a window holding the later singles
    /// with `D <= t - t_open <= D + W`, paired only with the opener (randoms estimate).
    pub delay: Option<f64>,
    /// Multiple-coincidence policy.
    pub policy: Policy,
}

impl CoincideConfig {
    /// The seed's rule: prompt window `W`, killAll.
    pub fn prompt(window: f64) -> Self {
        Self {
            window,
            delay: None,
            policy: Policy::KillAll,
        }
    }
    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        if !(self.window.is_finite() && self.window >= 0.0) {
            return Err(invalid(
                "coincidence window",
                format!("{} (must be finite and >= 0)", self.window),
            ));
        }
        if let Some(d) = self.delay {
            if !(d.is_finite() && d > 0.0 && (d + self.window).is_finite()) {
                return Err(invalid(
                    "coincidence delay",
                    format!("{d} (must be finite and > 0)"),
                ));
            }
        }
        Ok(())
    }
    /// How far after the opener a window reaches.
    pub fn reach(&self) -> f64 {
        match self.delay {
            Some(d) => d + self.window,
            None => self.window,
        }
    }
}

/// The first index where the singles are not sorted by time (or a time is NaN or infinite),
/// as a typed error.
pub fn check_sorted(singles: &[Single]) -> Result<()> {
    use rayon::prelude::*;
    check_times(singles, "singles to pair")?;
    // As `check_times`: branch-free pieces (each with the last single of the piece before
    // it) on every core, then the first disorder only when there is one.
    let disorder = |w: &[Single]| w.windows(2).fold(false, |b, p| b | (p[1].time < p[0].time));
    let n = singles.len();
    let any = if n <= CHECK_PIECE {
        disorder(singles)
    } else {
        (0..n.div_ceil(CHECK_PIECE)).into_par_iter().any(|p| {
            disorder(&singles[(p * CHECK_PIECE).saturating_sub(1)..((p + 1) * CHECK_PIECE).min(n)])
        })
    };
    if !any {
        return Ok(());
    }
    for i in 1..singles.len() {
        if singles[i].time < singles[i - 1].time {
            return Err(invalid(
                "singles to pair",
                format!(
                    "not sorted by time: single {i} (time {}) comes after single {} (time {})",
                    singles[i].time,
                    i - 1,
                    singles[i - 1].time
                ),
            ));
        }
    }
    Ok(())
}

/// The pairs of one window (members in time order), by the policy; candidate pairs all
/// `i < j` (prompt) or `(0, j)` (delayed).
pub(crate) fn policy_pairs(
    members: &[Single],
    delayed: bool,
    policy: Policy,
) -> Result<Vec<(usize, usize)>> {
    let n = members.len();
    if n < 2 {
        return Ok(vec![]);
    }
    let good = |i: usize, j: usize| members[i].crystal != members[j].crystal;
    if n == 2 {
        return Ok(if good(0, 1) { vec![(0, 1)] } else { vec![] });
    }
    if policy == Policy::KillAll {
        return Ok(vec![]);
    }
    if n > MAX_MULTIPLE as usize {
        return Err(Error::CapacityExceeded {
            what: "singles in one coincidence window (policies other than killAll)",
            needed: n as u64,
            capacity: MAX_MULTIPLE as u64,
        });
    }
    let mut cands = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            if !delayed || i == 0 {
                cands.push((i, j));
            }
        }
    }
    let goods: Vec<(usize, usize)> = cands.iter().copied().filter(|&(i, j)| good(i, j)).collect();
    if goods.is_empty() {
        return Ok(vec![]);
    }
    let sum = |(i, j): (usize, usize)| members[i].energy + members[j].energy;
    // First pair with the strictly largest sum.
    let winner = |list: &[(usize, usize)]| {
        let mut best = list[0];
        for &c in &list[1..] {
            if sum(c) > sum(best) {
                best = c;
            }
        }
        best
    };
    Ok(match policy {
        Policy::KillAll => vec![],
        Policy::TakeAllGoods => goods,
        Policy::TakeWinnerOfGoods => vec![winner(&goods)],
        Policy::TakeWinnerIfIsGood => {
            let w = winner(&cands);
            if good(w.0, w.1) {
                vec![w]
            } else {
                vec![]
            }
        }
        Policy::TakeWinnerIfAllAreGoods => {
            if goods.len() == cands.len() {
                vec![winner(&cands)]
            } else {
                vec![]
            }
        }
        Policy::KillAllIfMultipleGoods => {
            if goods.len() == 1 {
                goods
            } else {
                vec![]
            }
        }
    })
}

/// The window rule of issue 4 (the oracle), on singles sorted by time.
///
/// Prompt: walk the singles; a window opens at the first single not yet used and holds every
/// single with `t - t_open <= W`; exactly two singles in different crystals make a pair, more
/// than two are a multiple (handled by the policy; killAll: none); the next window opens at
/// the first single after the window. Delayed: every single opens a window of the later
/// singles with `D <= t - t_open <= D + W`.
pub fn coincide(singles: &[Single], cfg: &CoincideConfig) -> Result<Vec<Coincidence>> {
    Ok(coincide_until(singles, cfg, f64::INFINITY)?.0)
}

/// [`coincide`] on a stream prefix: every later single is known to come at or after
/// `watermark`, so a window opened at `t_open` is complete when `watermark - t_open > reach`.
/// Walks the windows in order and stops at the first incomplete one; returns the pairs of the
/// complete windows and the index of the first incomplete opener (`singles.len()` if none).
pub fn coincide_until(
    singles: &[Single],
    cfg: &CoincideConfig,
    watermark: f64,
) -> Result<(Vec<Coincidence>, usize)> {
    cfg.validate()?;
    check_sorted(singles)?;
    let mut out = Vec::new();
    let n = singles.len();
    let reach = cfg.reach();
    let mut open = 0;
    while open < n {
        let t0 = singles[open].time;
        if !detkit_gpu::pet::window_complete(t0, watermark, reach) {
            return Ok((out, open));
        }
        let mut members = vec![singles[open]];
        let mut end = open + 1;
        while end < n && singles[end].time - t0 <= reach {
            if cfg.delay.is_none_or(|d| singles[end].time - t0 >= d) {
                members.push(singles[end]);
            }
            end += 1;
        }
        for (i, j) in policy_pairs(&members, cfg.delay.is_some(), cfg.policy)? {
            out.push(Coincidence {
                a: members[i],
                b: members[j],
            });
        }
        // Prompt: the next window opens after this one; delayed: at the next single.
        open = if cfg.delay.is_some() { open + 1 } else { end };
    }
    Ok((out, n))
}

/// Stable merge of two sorted lists, `a` first on equal times.
pub fn merge(a: &[Single], b: &[Single]) -> Vec<Single> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j].time < a[i].time {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}
