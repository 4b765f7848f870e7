//! A device pool: one [`Backend`] (context, stream, loaded kernels) per GPU of the host, and
//! work spread over them with results in input order.
//!
//! ```
//! use detkit::pool::{Devices, DevicePool};
//! // Without a GPU the pool can still be made of CPU backends (e.g. for tests).
//! let pool = DevicePool::cpu(2);
//! let squares = pool
//!     .map(vec![1u32, 2, 3, 4, 5], |_backend, x| Ok::<_, detkit::Error>(x * x))
//!     .unwrap();
//! assert_eq!(squares, [1, 4, 9, 16, 25]);
//! assert_eq!("0,2".parse::<Devices>().unwrap(), Devices::List(vec![0, 2]));
//! ```
//!
//! [`DevicePool::map`] runs one host thread per device; each thread takes the next item from
//! a shared counter (so a slow device takes fewer items), runs the closure with its device's
//! backend, and stores the result at the item's index. Every device keeps its own stream,
//! context and scratch buffers, so the devices never wait on each other. Any error stops the
//! hand-out of further items; the error of the lowest item index is returned.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{invalid, Error, Result};
use crate::Backend;

/// Which GPUs a pool uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Devices {
    /// Every CUDA device the driver reports.
    All,
    /// These device ordinals, in this order (no repeats).
    List(Vec<usize>),
}

impl FromStr for Devices {
    type Err = Error;

    /// `all`, or a comma-separated list of ordinals such as `0,1`.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") {
            return Ok(Devices::All);
        }
        let mut list = Vec::new();
        for (i, part) in s.split(',').enumerate() {
            let d: usize = part.trim().parse().map_err(|_| {
                invalid(
                    "devices",
                    format!(
                        "item {i} `{part}` is not a device ordinal (expected `all` or e.g. `0,1`)"
                    ),
                )
            })?;
            if list.contains(&d) {
                return Err(invalid("devices", format!("device {d} is listed twice")));
            }
            list.push(d);
        }
        Ok(Devices::List(list))
    }
}

/// One backend per device; see the module docs.
pub struct DevicePool {
    backends: Vec<Backend>,
}

impl DevicePool {
    /// CUDA backends on `devices` (an error naming the device that cannot be opened, or when
    /// the list is empty or the driver reports no device).
    pub fn cuda(devices: &Devices) -> Result<Self> {
        let ordinals = match devices {
            Devices::All => {
                let n = crate::cuda::device_count()?;
                if n == 0 {
                    return Err(invalid("devices", "the CUDA driver reports no device"));
                }
                (0..n).collect()
            }
            Devices::List(l) if l.is_empty() => {
                return Err(invalid("devices", "empty list"));
            }
            Devices::List(l) => l.clone(),
        };
        let backends = ordinals
            .into_iter()
            .map(Backend::cuda)
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { backends })
    }

    /// `n` CPU backends (at least one): the same results without a GPU.
    pub fn cpu(n: usize) -> Self {
        Self {
            backends: (0..n.max(1)).map(|_| Backend::cpu()).collect(),
        }
    }

    /// A pool of the given backends (at least one).
    pub fn from_backends(backends: Vec<Backend>) -> Result<Self> {
        if backends.is_empty() {
            return Err(invalid("devices", "a pool needs at least one backend"));
        }
        Ok(Self { backends })
    }

    /// The backends, one per device, in pool order.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.backends.len()
    }

    /// Never true (a pool has at least one device); for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    /// Runs `f(backend, item)` for every item, spread over the devices (one host thread
    /// each), and returns the results in input order. On errors, no further items are
    /// started and the error of the lowest failed index is returned.
    /// The closure's error type is free (`detkit::Error`, `anyhow::Error`, ...).
    pub fn map<T, R, E, F>(&self, items: Vec<T>, f: F) -> std::result::Result<Vec<R>, E>
    where
        T: Send,
        R: Send,
        E: Send,
        F: Fn(&Backend, T) -> std::result::Result<R, E> + Sync,
    {
        let n = items.len();
        let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
        let results: Vec<Mutex<Option<std::result::Result<R, E>>>> =
            (0..n).map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for b in &self.backends {
                let (slots, results, next, failed, f) = (&slots, &results, &next, &failed, &f);
                s.spawn(move || loop {
                    if failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let item = lock(&slots[i]).take().expect("each index is taken once");
                    let r = f(b, item);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    *lock(&results[i]) = Some(r);
                });
            }
        });
        let mut out = Vec::with_capacity(n);
        for r in results {
            match r.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(Ok(v)) => out.push(v),
                Some(Err(e)) => return Err(e),
                // Not started because an earlier-started item failed; that error comes first
                // only if its index is lower, so look for it.
                None => {}
            }
        }
        if out.len() == n {
            Ok(out)
        } else {
            unreachable!("an item was skipped only after a failure, which returned above")
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_input_order_whatever_the_timing() {
        let pool = DevicePool::cpu(4);
        let items: Vec<u64> = (0..200).collect();
        // Later items finish first: the order must still be the input order.
        let r = pool
            .map(items.clone(), |_, x| {
                std::thread::sleep(std::time::Duration::from_micros(200 - x));
                Ok::<_, Error>(x * 3)
            })
            .unwrap();
        assert_eq!(r, items.iter().map(|x| x * 3).collect::<Vec<_>>());
        let empty: Vec<u8> = pool.map(vec![], |_, x: u8| Ok::<_, Error>(x)).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn the_lowest_failed_index_is_reported() {
        let pool = DevicePool::cpu(3);
        let r = pool.map((0..50).collect(), |_, x: u32| {
            if x == 17 || x == 30 {
                Err(format!("item {x} failed"))
            } else {
                Ok(x)
            }
        });
        assert_eq!(r.unwrap_err(), "item 17 failed");
    }

    #[test]
    fn device_lists_parse_or_say_what_is_wrong() {
        assert_eq!("all".parse::<Devices>().unwrap(), Devices::All);
        assert_eq!(
            " 1, 0 ".parse::<Devices>().unwrap(),
            Devices::List(vec![1, 0])
        );
        let e = "0,x".parse::<Devices>().unwrap_err().to_string();
        assert!(e.contains("`x` is not a device ordinal"), "{e}");
        let e = "1,1".parse::<Devices>().unwrap_err().to_string();
        assert!(e.contains("listed twice"), "{e}");
        assert!("".parse::<Devices>().is_err());
        assert!(DevicePool::from_backends(vec![]).is_err());
        assert!(DevicePool::cuda(&Devices::List(vec![])).is_err());
    }
}
