//! Memory estimates: sizes that come from a user or a file are checked against what the
//! system can give before anything is allocated, so a request that cannot fit is a typed
//! [`Error::OutOfMemory`] saying how much it needs, not an abort in the allocator.
//!
//! What is available is the smaller of the system's available memory and swap
//! (`MemAvailable + SwapFree` of `/proc/meminfo`) and what the process's address-space limit
//! (`ulimit -v`) leaves above its current size. Where neither is known (not Linux), every
//! estimate passes and the allocator has the last word ([`try_vec`] where the size comes
//! from the caller).

use crate::error::{Error, Result};

/// A `KEY:   N kB` value of a `/proc` file, in bytes.
fn proc_kb(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// What the process's address-space limit leaves, if there is one.
fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft = line["Max address space".len()..]
        .split_whitespace()
        .next()?;
    let limit: u64 = soft.parse().ok()?; // "unlimited" does not parse: no limit
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let used = proc_kb(&status, "VmSize:").unwrap_or(0);
    Some(limit.saturating_sub(used))
}

/// Bytes this process can still allocate, as far as the system says (`None`: unknown).
pub fn available_bytes() -> Option<u64> {
    let system = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| Some(proc_kb(&m, "MemAvailable:")? + proc_kb(&m, "SwapFree:").unwrap_or(0)));
    match (system, address_space_left()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Checks that `needed` bytes (an estimate, for `what`) fit in what is available.
pub fn check_estimate(what: impl Into<String>, needed: u64) -> Result<()> {
    match available_bytes() {
        Some(available) if needed > available => Err(Error::OutOfMemory {
            what: what.into(),
            needed,
            available: Some(available),
        }),
        _ => Ok(()),
    }
}

/// An empty vector with room for `n` elements, or [`Error::OutOfMemory`] when the allocator
/// refuses (for sizes that come from a caller or a file).
pub fn try_vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: what.to_string(),
        needed: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        available: None,
    })?;
    Ok(v)
}

/// Asks the kernel to back `v`'s spare capacity with transparent huge pages (Linux,
/// `madvise(MADV_HUGEPAGE)`, for buffers of 4 MiB or more per worker of the current rayon
/// pool): one page fault per 2 MiB instead of per 4 KiB when the output is first written.
/// A smaller buffer written by many workers at once keeps 4 KiB pages: its few huge pages
/// would each be faulted (and zeroed, 2 MiB) by one worker while the others writing into it
/// wait. A hint: nothing else changes.
pub fn huge_pages<T>(v: &mut Vec<T>) {
    let spare = v.spare_capacity_mut();
    advise_huge(spare.as_mut_ptr() as usize, std::mem::size_of_val(spare));
}

/// `madvise(MADV_HUGEPAGE)` on the whole 2 MiB pages inside `[start, start + bytes)`.
fn advise_huge(start: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if bytes / rayon::current_num_threads().max(1) < 2 * HUGE {
            return;
        }
        let lo = start.next_multiple_of(HUGE);
        let hi = (start + bytes) / HUGE * HUGE;
        if hi > lo {
            // SAFETY: `[lo, hi)` lies inside `[start, start + bytes)`, memory of a live
            // allocation the caller borrows mutably; MADV_HUGEPAGE only changes how the
            // range is backed, never its contents, and its failure is harmless (ignored).
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_estimate_is_refused_and_a_small_one_passes() {
        if available_bytes().is_none() {
            return; // not Linux: nothing to compare with
        }
        let e = check_estimate("a test", u64::MAX).unwrap_err().to_string();
        assert!(e.contains("not enough memory for a test"), "{e}");
        check_estimate("a test", 1).unwrap();
        assert!(try_vec::<u64>(usize::MAX / 8, "a test").is_err());
        assert_eq!(try_vec::<u8>(16, "x").unwrap().capacity(), 16);
    }
}
