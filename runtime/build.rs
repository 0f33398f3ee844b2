//! Sets `cfg(has_shared_fixtures)` when the MSCCL XML fixtures of `../shared/fixtures` (beside
//! the checkout) exist, so that the conformance tests that read them show up as ignored, not
//! as passed, in a plain clone.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_shared_fixtures)");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    if fixtures.is_dir() {
        println!("cargo::rustc-cfg=has_shared_fixtures");
        // Re-run when the fixtures change or disappear.
        println!("cargo::rerun-if-changed={}", fixtures.display());
    } else {
        // A path that does not exist would re-run this script, and so rebuild the crate and
        // everything that depends on it, on every build: watch only this file. After adding
        // `../shared`, `touch runtime/build.rs` (or `cargo clean -p runtime`).
        println!("cargo::rerun-if-changed=build.rs");
    }
}
