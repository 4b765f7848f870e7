//! `detkit info`: the embedded kernel images, listed without a device (CI has none).

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn detkit() -> Command {
    let mut c = Command::cargo_bin("detkit").expect("the detkit binary");
    c.env_remove("RUST_BACKTRACE").env_remove("DETKIT_IMAGE");
    c
}

#[test]
fn info_lists_every_embedded_image() {
    let mut c = detkit();
    c.args(["info", "--no-device"]).assert().success().stdout(
        contains("cubin sm_80 ")
            .and(contains("cubin sm_86 "))
            .and(contains("cubin sm_89 "))
            .and(contains("cubin sm_90 "))
            .and(contains("cubin sm_100 "))
            .and(contains("cubin sm_120 "))
            .and(contains("PTX sm_80 (JIT at load)  detkit-sm_80.ptx"))
            .and(contains("PTX sm_70 (JIT at load)  detkit.ptx"))
            .and(contains("DETKIT_IMAGE=<unset> (default choice)"))
            .and(contains(concat!("detkit ", env!("CARGO_PKG_VERSION")))),
    );
}

#[test]
fn info_says_when_an_image_is_forced() {
    let mut c = detkit();
    c.env("DETKIT_IMAGE", "ptx70")
        .args(["info", "--no-device"])
        .assert()
        .success()
        .stdout(contains("DETKIT_IMAGE=ptx70 (forced)"));
}

#[test]
fn info_without_a_driver_reports_no_device() {
    if detkit::driver_present() {
        return; // a GPU machine: the device lines are checked by the GPU tests
    }
    let mut c = detkit();
    c.arg("info")
        .assert()
        .success()
        .stdout(contains("devices: none"));
}
