//! Shared helpers of the workspace-level GPU tests and benchmarks.

use std::fmt::Debug;

/// Compares two sequences element by element; reports the number of mismatches and the
/// first few of them (every mismatch is counted, not just the first).
pub fn exact<T: PartialEq + Debug>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: length {} != expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    if bad.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = bad
        .iter()
        .take(8)
        .map(|&i| format!("[{i}] got {:?} want {:?}", got[i], want[i]))
        .collect();
    Err(format!(
        "{what}: {} of {} elements differ: {}",
        bad.len(),
        got.len(),
        shown.join(", ")
    ))
}

/// Checks a condition, with a message.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// The sizes every primitive is tested at: 0, 1, warp size ± 1, block size ± 1, tile size ± 1,
/// 2^20 + 7 and (unless `quick`) 2^26.
pub fn sizes(block: usize, tile: usize, quick: bool) -> Vec<usize> {
    let mut v = vec![
        0,
        1,
        31,
        32,
        33,
        block - 1,
        block,
        block + 1,
        tile - 1,
        tile,
        tile + 1,
        3 * tile + 5,
        (1 << 20) + 7,
    ];
    if !quick {
        v.push(1 << 26);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Median of `reps` timings in milliseconds of `f` (CUDA events around it on the context's
/// stream), after `warmup` untimed runs. The benchmarks' one timing loop.
pub fn median_ms(
    g: &detkit::GpuContext,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> detkit::Result<()>,
) -> anyhow::Result<f64> {
    use cudarc::driver::sys::CUevent_flags;
    for _ in 0..warmup {
        f()?;
    }
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let a = g
            .stream()
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        f()?;
        let b = g
            .stream()
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        b.synchronize()?;
        t.push(a.elapsed_ms(&b)? as f64);
    }
    Ok(median(t))
}

/// [`exact`] as a benchmark check: a mismatch is an error starting `CHECK FAILED`, so no
/// time is printed for a wrong result (the GPU bundle greps for that marker).
pub fn check<T: PartialEq + Debug>(what: &str, got: &[T], want: &[T]) -> anyhow::Result<()> {
    exact(what, got, want).map_err(|m| anyhow::anyhow!("CHECK FAILED {m}"))
}

/// Parses a comma-separated list (`--sizes 20,22,24`).
pub fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, T::Err> {
    s.split(',').map(|x| x.trim().parse()).collect()
}

/// Median of timings (the upper middle for an even count); `v` must not be empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The oracle's results for a batch built from events clustered one by one: per-digi
/// cluster indices are module-local, so a batch's results are its events' results
/// concatenated, with `module_first` shifted by each event's offset.
pub fn concat_clusters(parts: &[&detkit::clustering::Clusters]) -> detkit::clustering::Clusters {
    let modules = parts.first().map_or(0, |p| p.modules);
    let mut out = detkit::clustering::Clusters {
        clus: Vec::new(),
        clus_in_module: Vec::new(),
        module_first: Vec::new(),
        modules,
        medium_modules: 0,
        fallback_modules: 0,
    };
    for p in parts {
        let base = out.clus.len() as u32;
        out.clus.extend_from_slice(&p.clus);
        out.clus_in_module.extend_from_slice(&p.clus_in_module);
        out.module_first.extend(p.module_first.iter().map(|&f| {
            if f == u32::MAX {
                f
            } else {
                f + base
            }
        }));
    }
    out
}

/// A PET sort on the device, as the benchmarks time it: `(context, input, other buffer, n)`,
/// returning whether the sorted singles ended in the other buffer.
pub type PetSortFn<'r> = Box<
    dyn Fn(
            &detkit::GpuContext,
            &mut detkit::pet::SinglesBuffer,
            &mut detkit::pet::SinglesBuffer,
            usize,
        ) -> detkit::Result<bool>
        + 'r,
>;

/// Runs `sort` on a fresh copy of `input` (in `a`, `b` the other buffer), checks the result
/// against `want`, then returns its median time in ms less the copy's `copy_ms`.
#[allow(clippy::too_many_arguments)]
pub fn time_pet_sort(
    g: &detkit::GpuContext,
    what: &str,
    sort: &PetSortFn,
    input: &detkit::pet::SinglesBuffer,
    a: &mut detkit::pet::SinglesBuffer,
    b: &mut detkit::pet::SinglesBuffer,
    n: usize,
    want: &[detkit_gpu::pet::Single],
    reps: usize,
    copy_ms: f64,
) -> anyhow::Result<f64> {
    use detkit::error::DriverContext;
    g.stream().memcpy_dtod(input, a)?;
    let in_b = sort(g, a, b, n)?;
    check(
        what,
        &g.download_records(if in_b { &*b } else { &*a })?,
        want,
    )?;
    Ok(median_ms(g, 3, reps, || {
        g.stream().memcpy_dtod(input, a).ctx("copy")?;
        sort(g, a, b, n).map(|_| ())
    })? - copy_ms)
}

/// Compiles `bench/pet_cub.cu` with nvcc into `dir` and runs it on the key files (raw `u64`
/// time keys); returns its `(algo, file, median ms)` rows, or why not (no nvcc, a failed
/// build or check).
pub fn run_pet_cub(
    dir: &std::path::Path,
    reps: usize,
    files: &[std::path::PathBuf],
) -> Result<Vec<(String, String, f64)>, String> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let src = dir.join("pet_cub.cu");
    std::fs::write(&src, include_str!("../../bench/pet_cub.cu")).map_err(|e| e.to_string())?;
    let exe = dir.join("pet_cub");
    let arch = std::env::var("CUDA_ARCH").unwrap_or_else(|_| "sm_90".into());
    let nvcc = ["nvcc", "/usr/local/cuda/bin/nvcc"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok()
        })
        .ok_or("nvcc not found")?;
    let out = std::process::Command::new(nvcc)
        .args(["-O3", "-std=c++17", &format!("-arch={arch}"), "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "nvcc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let out = std::process::Command::new(&exe)
        .arg(reps.to_string())
        .args(files)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() || text.contains("CHECK FAILED") {
        return Err(format!(
            "pet_cub failed: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.len() == 5 && f[0] == "cub").then(|| {
                (
                    f[1].to_string(),
                    f[2].to_string(),
                    f[4].parse().unwrap_or(f64::NAN),
                )
            })
        })
        .collect())
}

/// `events` Run-3-like events (the first `digis` digis of each, at most), concatenated, with
/// their event offsets: the batches of the door and device-view GPU tests.
pub fn run3_batch(seed: u64, events: usize, digis: usize) -> (detkit::clustering::Digis, Vec<u32>) {
    use detkit::clustering::{gen, Digis, DigisRef};
    let mut all = Digis::default();
    let mut offsets = vec![0u32];
    for i in 0..events {
        let ev = gen::run3_event(seed ^ (i as u64 * 7919));
        let n = ev.len().min(digis);
        all.extend(&DigisRef::from(&ev).slice(0..n).to_digis());
        offsets.push(all.len() as u32);
    }
    (all, offsets)
}

/// One event's spacepoints as the five host columns Python holds (x, y, z, var_r, var_z).
pub fn sp_columns(sps: &[detkit::seeding::SpacePoint]) -> [Vec<f32>; 5] {
    [
        sps.iter().map(|s| s.x).collect(),
        sps.iter().map(|s| s.y).collect(),
        sps.iter().map(|s| s.z).collect(),
        sps.iter().map(|s| s.var_r).collect(),
        sps.iter().map(|s| s.var_z).collect(),
    ]
}

/// A borrowed view of [`sp_columns`]' five columns.
pub fn sp_columns_ref(c: &[Vec<f32>; 5]) -> detkit::seeding::SpacePointsRef<'_> {
    detkit::seeding::SpacePointsRef {
        x: &c[0],
        y: &c[1],
        z: &c[2],
        var_r: &c[3],
        var_z: &c[4],
    }
}

/// Two clustering results equal array by array (`clus`, `clus_in_module`, `module_first`),
/// the first difference named with `what`.
pub fn exact_clusters(
    what: &str,
    got: &detkit::clustering::Clusters,
    want: &detkit::clustering::Clusters,
) -> Result<(), String> {
    exact(&format!("{what}: clus"), &got.clus, &want.clus)?;
    exact(
        &format!("{what}: clus_in_module"),
        &got.clus_in_module,
        &want.clus_in_module,
    )?;
    exact(
        &format!("{what}: module_first"),
        &got.module_first,
        &want.module_first,
    )
}

#[cfg(test)]
mod tests {
    use detkit::clustering::{cpu, gen, Digis, Geometry};

    /// The oracle of a batch equals its events' oracles concatenated (what the GPU tests
    /// and bench-clustering compare batches against), empty and invalid-only events included.
    #[test]
    fn concat_clusters_is_the_batch_oracle() {
        let g = Geometry::phase1();
        let cfg = gen::EventConfig {
            clusters: 400.0,
            ..gen::EventConfig::run3()
        };
        let mut invalid = Digis::default();
        for k in 0..17u16 {
            invalid.push(detkit_gpu::clustering::INVALID_MODULE, k, 2 * k, 3000);
        }
        let events = [
            gen::event(&g, &cfg, 1),
            Digis::default(),
            gen::event(&g, &cfg, 2),
            invalid,
            gen::event(&g, &cfg, 3),
        ];
        for cut in [None, Some(g.default_cut)] {
            let parts: Vec<_> = events
                .iter()
                .map(|d| cpu::cluster(d, &[0, d.len() as u32], &g, cut))
                .collect();
            let mut batch = Digis::default();
            let mut offsets = vec![0u32];
            for d in &events {
                batch.extend(d);
                offsets.push(batch.len() as u32);
            }
            let want = cpu::cluster(&batch, &offsets, &g, cut);
            let refs: Vec<_> = parts.iter().collect();
            assert!(super::concat_clusters(&refs).same_clusters(&want));
        }
    }
}
