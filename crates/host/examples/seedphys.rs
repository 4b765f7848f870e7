use detkit::seeding::{gen, SeedingSettings};
fn main() {
    let mu: f64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(200.0);
    let cfg = SeedingSettings::default().to_config().unwrap();
    println!("{cfg:?}");
    let ev = gen::generate(7, mu, true);
    let t = std::time::Instant::now();
    let out = detkit::Backend::cpu().seed(&ev.spacepoints, &cfg).unwrap();
    println!("n={} {:?} {:.3}s", ev.spacepoints.len(), out.stats, t.elapsed().as_secs_f64());
    println!("{}", gen::physics(&ev, &out.seeds, &out.params));
}
