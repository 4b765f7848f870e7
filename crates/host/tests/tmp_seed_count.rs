use detkit::seeding::{gen, SeedingSettings};
use detkit_gpu::seeding as k;

#[test]
fn count() {
    let cfg = SeedingSettings::default().to_config().unwrap();
    let ev = gen::generate(1200, 200.0, true);
    let sps = &ev.spacepoints;
    let keys = detkit::seeding::cpu::grid(&cfg, sps);
    let n_r = cfg.n_r as usize;
    let mut mid_tri: Vec<u32> = Vec::new();
    let mut mid_nb: Vec<u32> = Vec::new();
    let mut bots_with = Vec::new();
    for (key, members) in keys.iter().enumerate() {
        let bin = (key / n_r) as u32;
        for &mi in members {
            let m = k::binned(&sps[mi as usize], mi, bin);
            let nb = k::neighbour_bins(&cfg, bin);
            let cands = |(lo, hi): (f32, f32), bottom: bool| {
                let (s0, s1) = k::slice_range(&cfg, lo, hi);
                let mut v = Vec::new();
                for &ob in &nb.bins[..nb.len as usize] {
                    for s in s0..s1 {
                        for &oi in &keys[ob as usize * n_r + s as usize] {
                            let o = k::binned(&sps[oi as usize], oi, ob);
                            if k::doublet_compatible(&cfg, &m, &o, bottom) {
                                v.push(o);
                            }
                        }
                    }
                }
                v
            };
            let [wb, wt] = k::radial_windows(&cfg, m.r);
            let b = cands(wb, true);
            let t = cands(wt, false);
            if b.is_empty() || t.is_empty() {
                mid_tri.push(0);
                mid_nb.push(0);
                bots_with.push(0);
                continue;
            }
            let mut tot = 0;
            let mut bw = 0;
            for x in &b {
                let lb = k::transform_coordinates(&m, x, true);
                let (is, sc) = k::bottom_scattering(&cfg, &lb);
                let mut c = 0;
                for y in &t {
                    let lt = k::transform_coordinates(&m, y, false);
                    if k::triplet_compatible(&cfg, &m, &lb, &lt, is, sc).is_some() {
                        c += 1;
                    }
                }
                tot += c;
                if c > 0 {
                    bw += 1;
                }
            }
            mid_tri.push(tot);
            mid_nb.push(b.len() as u32);
            bots_with.push(bw);
        }
    }
    let n = mid_tri.len();
    let with = mid_tri.iter().filter(|&&c| c > 0).count();
    let nbpos = mid_nb.iter().filter(|&&c| c > 0).count();
    println!(
        "valid middles {n}, with doublets {nbpos}, with triplets {with}, triplets {}",
        mid_tri.iter().sum::<u32>()
    );
    println!("bottoms with triplets {}", bots_with.iter().sum::<u32>());
    for g in [8usize, 16, 32] {
        let per: Vec<usize> = mid_tri
            .chunks(g)
            .map(|c| c.iter().filter(|&&x| x > 0).count())
            .collect();
        let mut h = per.clone();
        h.sort();
        let mean = per.iter().sum::<usize>() as f64 / per.len() as f64;
        // bottoms with triplets per group
        let bw: Vec<u32> = bots_with.chunks(g).map(|c| c.iter().sum()).collect();
        let mut hb = bw.clone();
        hb.sort();
        println!("group {g}: groups {} mean with {mean:.2} p50 {} p99 {} max {} | bottoms-with per group mean {:.2} max {}", per.len(), h[h.len()/2], h[h.len()*99/100], h[h.len()-1], bw.iter().sum::<u32>() as f64 / bw.len() as f64, hb[hb.len()-1]);
    }
    let mut nbh = mid_nb.clone();
    nbh.sort();
    println!(
        "n_bot p50 {} p90 {} max {}",
        nbh[n / 2],
        nbh[n * 9 / 10],
        nbh[n - 1]
    );
}

#[test]
fn fans() {
    let cfg = SeedingSettings::default().to_config().unwrap();
    for k in [31usize, 32, 33, 200] {
        for var in [0.0f32, 100.0] {
            let f = gen::fan(k, var);
            let (_s, st) = detkit::seeding::cpu::seeds(&cfg, &f);
            println!("fan {k} {var}: {st:?}");
        }
    }
}

#[test]
fn bound() {
    let cfg = SeedingSettings::default().to_config().unwrap();
    let ev = gen::generate(1200, 200.0, true);
    let sps = &ev.spacepoints;
    let keys = detkit::seeding::cpu::grid(&cfg, sps);
    let n_r = cfg.n_r as usize;
    // per doublet: (c1, thr, lb, m, middle's top lcs index)
    let mut lanes: Vec<(f32, f32, k::LinCircle, k::BinnedSp, usize)> = Vec::new();
    let mut tops_of: Vec<Vec<k::LinCircle>> = Vec::new();
    let (mut pairs, mut old_sure, mut new_sure, mut barrel_pairs) = (0u64, 0u64, 0u64, 0u64);
    for (key, members) in keys.iter().enumerate() {
        let bin = (key / n_r) as u32;
        for &mi in members {
            let m = k::binned(&sps[mi as usize], mi, bin);
            let nb = k::neighbour_bins(&cfg, bin);
            let cands = |(lo, hi): (f32, f32), bottom: bool| {
                let (s0, s1) = k::slice_range(&cfg, lo, hi);
                let mut v = Vec::new();
                for &ob in &nb.bins[..nb.len as usize] {
                    for s in s0..s1 {
                        for &oi in &keys[ob as usize * n_r + s as usize] {
                            let o = k::binned(&sps[oi as usize], oi, ob);
                            if k::doublet_compatible(&cfg, &m, &o, bottom) {
                                v.push(o);
                            }
                        }
                    }
                }
                v
            };
            let [wb, wt] = k::radial_windows(&cfg, m.r);
            let b = cands(wb, true);
            let t = cands(wt, false);
            if b.is_empty() || t.is_empty() {
                continue;
            }
            let lts: Vec<k::LinCircle> = t
                .iter()
                .map(|y| k::transform_coordinates(&m, y, false))
                .collect();
            let mut tb = k::TopBounds::EMPTY;
            for lt in &lts {
                tb = tb.with_top(lt);
            }
            let ti = tops_of.len();
            tops_of.push(lts);
            for x in &b {
                let lb = k::transform_coordinates(&m, x, true);
                let (is, sc) = k::bottom_scattering(&cfg, &lb);
                let thr = k::triplet_reject_threshold(sc);
                let c1 = k::triplet_reject_bound(&m, &lb, &tb);
                for lt in &tops_of[ti] {
                    pairs += 1;
                    if m.var_r == 0.0 {
                        barrel_pairs += 1;
                    }
                    let o = k::triplet_surely_rejected(&m, &lb, lt, thr);
                    let nw = k::triplet_bound_rejects(c1, lb.cot_theta, lt.cot_theta, thr);
                    if nw {
                        assert!(o, "bound rejects but exact-sure does not");
                        assert!(k::triplet_compatible(&cfg, &m, &lb, lt, is, sc).is_none());
                    }
                    old_sure += o as u64;
                    new_sure += nw as u64;
                }
                lanes.push((c1, thr, lb, m, ti));
            }
        }
    }
    println!(
        "pairs {pairs} barrel-middle pairs {barrel_pairs} old sure {:.4} new sure {:.4}",
        old_sure as f64 / pairs as f64,
        new_sure as f64 / pairs as f64
    );
    let (mut steps, mut all_old, mut all_new) = (0u64, 0u64, 0u64);
    for w in lanes.chunks(32) {
        let maxn = w.iter().map(|l| tops_of[l.4].len()).max().unwrap();
        for s in 0..maxn {
            steps += 1;
            let (mut ao, mut an) = (true, true);
            for l in w {
                let tops = &tops_of[l.4];
                if s >= tops.len() {
                    continue;
                }
                let lt = &tops[s];
                if !k::triplet_surely_rejected(&l.3, &l.2, lt, l.1) {
                    ao = false;
                }
                if !k::triplet_bound_rejects(l.0, l.2.cot_theta, lt.cot_theta, l.1) {
                    an = false;
                }
            }
            all_old += ao as u64;
            all_new += an as u64;
        }
    }
    println!(
        "warp steps {steps}: all lanes old-sure {:.4}, all lanes bound {:.4}",
        all_old as f64 / steps as f64,
        all_new as f64 / steps as f64
    );
}
