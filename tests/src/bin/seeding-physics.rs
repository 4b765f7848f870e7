//! Seeding efficiency in pT and η bins (issue 14's physics table): generated ⟨μ⟩ events with
//! long-pixel resolution (10 µm r·φ, 50 µm along the pixel) seeded with and without the
//! spacepoint variances, and at the generator's default 15 µm for reference.
//!
//! Usage: `seeding-physics [--events 8] [--mu 200] [--backend cpu|cuda]`
//!
//! The CPU backend (the default) runs the oracle; the GPU gives the same seeds bit for bit
//! (GPU tests), so either prints the same table. A particle counts when it left at least 3
//! hits; it is found when one seed's three spacepoints are all its own.

use anyhow::{bail, Context, Result};
use detkit::seeding::gen::{self, BinCount, Resolution};
use detkit::seeding::SeedingSettings;
use detkit::Backend;

const PT_BINS: [(f64, f64); 5] = [
    (1.0, 2.0),
    (2.0, 4.0),
    (4.0, 6.0),
    (6.0, 10.0),
    (10.0, f64::INFINITY),
];
const ETA_BINS: [(f64, f64); 7] = [
    (0.0, 0.5),
    (0.5, 1.0),
    (1.0, 1.5),
    (1.5, 2.0),
    (2.0, 2.5),
    (2.5, 3.0),
    (3.0, 4.0),
];

fn main() -> Result<()> {
    let (mut events, mut mu, mut backend) = (8u64, 200.0f64, "cpu".to_string());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--events" => events = args.next().context("--events needs a number")?.parse()?,
            "--mu" => mu = args.next().context("--mu needs a number")?.parse()?,
            "--backend" => backend = args.next().context("--backend needs cpu|cuda")?,
            _ => bail!("usage: seeding-physics [--events 8] [--mu 200] [--backend cpu|cuda]"),
        }
    }
    let b = match backend.as_str() {
        "cpu" => Backend::cpu(),
        "cuda" => Backend::cuda(0)?,
        other => bail!("--backend {other}: expected cpu or cuda"),
    };
    println!(
        "# {}; {events} events at <mu> = {mu} with a ttbar-like hard scatter, seeds 3000..",
        b.description()
    );
    let traccc = SeedingSettings::default();
    // ACTS's Open Data Detector examples seed with sigmaScattering = 5 (traccc's default is 3).
    let five = SeedingSettings {
        sigma_scattering: 5.0,
        ..SeedingSettings::default()
    };
    // More scattering allowance (the generator has no material; a long-pixel detector's
    // Δcotθ errors need room at high pT, where the allowance ∝ 1/pT is smallest).
    let rl2 = SeedingSettings {
        rad_length_per_seed: 0.2,
        ..SeedingSettings::default()
    };
    let configs = [
        (
            "long pixels 10/50 um, variances given, traccc defaults",
            Resolution::long_pixels(true),
            &traccc,
        ),
        (
            "long pixels 10/50 um, variances 0 (CSV without var_r/var_z), traccc defaults",
            Resolution::long_pixels(false),
            &traccc,
        ),
        (
            "long pixels 10/50 um, variances given, sigma_scattering = 5",
            Resolution::long_pixels(true),
            &five,
        ),
        (
            "long pixels 10/50 um, variances given, rad_length_per_seed = 0.2",
            Resolution::long_pixels(true),
            &rl2,
        ),
        (
            "15/15 um, variances given (generator default), traccc defaults",
            Resolution::default(),
            &traccc,
        ),
    ];
    for (name, res, settings) in configs {
        let cfg = settings.to_config()?;
        let mut pt = vec![BinCount::default(); PT_BINS.len()];
        let mut eta = vec![BinCount::default(); ETA_BINS.len()];
        let (mut seeds, mut fakes) = (0usize, 0usize);
        for e in 0..events {
            let ev = gen::generate_with(3000 + e, mu, true, res);
            let out = b.seed(&ev.spacepoints, &cfg)?;
            let ph = gen::physics(&ev, &out.seeds, &out.params);
            seeds += ph.seeds;
            fakes += ph.fakes;
            let barrel = |p: &gen::Particle| p.eta.abs() < 1.0;
            let add = |acc: &mut Vec<BinCount>, v: Vec<BinCount>| {
                for (a, x) in acc.iter_mut().zip(v) {
                    a.add(x);
                }
            };
            add(
                &mut pt,
                gen::efficiency_bins(&ev, &out.seeds, &PT_BINS, |p| p.pt as f64, barrel),
            );
            add(
                &mut eta,
                gen::efficiency_bins(
                    &ev,
                    &out.seeds,
                    &ETA_BINS,
                    |p| p.eta.abs() as f64,
                    |p| p.pt > 1.0,
                ),
            );
        }
        println!("\n## {name}\n");
        println!(
            "seeds per event {:.0}, fake rate {:.1} %\n",
            seeds as f64 / events as f64,
            100.0 * fakes as f64 / seeds.max(1) as f64
        );
        println!("| pT (GeV), abs(eta) < 1 | particles | found | efficiency |");
        println!("|---|---:|---:|---:|");
        for ((lo, hi), c) in PT_BINS.iter().zip(&pt) {
            println!(
                "| {lo}-{} | {} | {} | {:.1} % |",
                if hi.is_finite() {
                    hi.to_string()
                } else {
                    "inf".into()
                },
                c.selected,
                c.found,
                100.0 * c.efficiency()
            );
        }
        println!("\n| abs(eta), pT > 1 GeV | particles | found | efficiency |");
        println!("|---|---:|---:|---:|");
        for ((lo, hi), c) in ETA_BINS.iter().zip(&eta) {
            println!(
                "| {lo}-{hi} | {} | {} | {:.1} % |",
                c.selected,
                c.found,
                100.0 * c.efficiency()
            );
        }
    }
    Ok(())
}
