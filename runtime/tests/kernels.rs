//! The reduction kernels compile with NVRTC for every architecture the executor targets, and
//! their entry points take exactly what the launcher passes. Needs libnvrtc but no GPU.
//!
//! NVRTC is found as the executor finds it (the dynamic linker: `LD_LIBRARY_PATH`, system
//! folders), else where `scripts/setup` installs it: `$SYNTH_NVRTC_DIR`, by default
//! `~/.cache/synth/nvrtc` (the pip package `nvidia-cuda-nvrtc-cu12`, installed with
//! `--target`). Without it the test says so and passes, except under `CI=true`, where it fails.

mod common;

use common::recorder::{Call, Recorder};
use runtime::builders::{ring_allreduce, ring_reduce_scatter};
use runtime::compute::{adam_scalars, Compute, ADAM, BIAS_DROPOUT_RESIDUAL, SGD};
use runtime::cuda::compute::{compute_kernel_args, compute_kernel_name, compute_source};
use runtime::cuda::launch::Launcher;
use runtime::cuda::nvrtc::{self, NvrtcError};
use runtime::cuda::schedule::Schedule;
use runtime::cuda::{kernel_names, Dtype, KERNEL_ARGS};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Compute capabilities the kernels must compile for: Volta, Ampere, Hopper, Blackwell.
const ARCHS: [(i32, i32); 4] = [(7, 0), (8, 0), (9, 0), (10, 0)];

/// Where `scripts/setup` puts the pip package.
fn setup_dir() -> Option<PathBuf> {
    match std::env::var_os("SYNTH_NVRTC_DIR") {
        Some(d) => Some(PathBuf::from(d)),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/synth/nvrtc")),
    }
}

/// Makes libnvrtc loadable (the dynamic linker's, else the one `scripts/setup` installed,
/// loaded by path so that cudarc's load by name finds it), once per process. Returns where it
/// came from, or why there is none.
fn load_nvrtc() -> Result<String, String> {
    static LOADED: OnceLock<Result<String, String>> = OnceLock::new();
    LOADED.get_or_init(load_once).clone()
}

fn load_once() -> Result<String, String> {
    if nvrtc::present() {
        return Ok("found by the dynamic linker".into());
    }
    let Some(dir) = setup_dir() else {
        return Err("no HOME and no SYNTH_NVRTC_DIR".into());
    };
    let lib = dir.join("nvidia/cuda_nvrtc/lib");
    let found = std::fs::read_dir(&lib)
        .map_err(|e| format!("{}: {e}", lib.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc.so."))
        })
        .ok_or_else(|| format!("no libnvrtc.so.N in {}", lib.display()))?;
    // SAFETY: loading NVRTC runs no initialisation code with preconditions; the library stays
    // loaded for the whole process (forgotten, never closed).
    let handle = unsafe { libloading::Library::new(&found) }
        .map_err(|e| format!("{}: {e}", found.display()))?;
    std::mem::forget(handle);
    if nvrtc::present() {
        Ok(found.display().to_string())
    } else {
        Err(format!(
            "{} loads, but not under a name cudarc asks for",
            found.display()
        ))
    }
}

/// Notice outside CI, failure under `CI=true` (a broken install must not pass unseen).
fn missing(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} (CI=true: scripts/setup should have installed NVRTC)");
    }
    eprintln!("notice: skipping the NVRTC check: {what}; run scripts/setup to install it");
}

/// Every `.entry` of a PTX module with the types of its parameters.
fn entries(ptx: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let Some(at) = line.find(".entry ") else {
            continue;
        };
        let rest = &line[at + ".entry ".len()..];
        let name = rest.split(['(', ' ']).next().unwrap_or("").to_string();
        let mut params = Vec::new();
        if !rest.contains(')') {
            for l in lines.by_ref() {
                let t = l.trim();
                if let Some(p) = t.strip_prefix(".param ") {
                    params.push(p.split_whitespace().next().unwrap_or("").to_string());
                }
                if t.starts_with(')') {
                    break;
                }
            }
        }
        out.insert(name, params);
    }
    out
}

/// The kernels the launcher launches, with their argument counts, for reducing programs in
/// every dtype, with aligned and unaligned chunks, in one and several passes.
fn launched() -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let programs = [
        ring_allreduce(&[0, 1, 2, 3], 1, false),
        ring_reduce_scatter(&[0, 1, 2], 2, true),
    ];
    for p in &programs {
        for inplace in p.modes() {
            for slices in [1, 3] {
                let s = Schedule::new(p, inplace, slices).unwrap();
                for dtype in Dtype::ALL {
                    for chunk in [64, 7] {
                        let bases = (0..p.ngpus as u64)
                            .map(|r| std::array::from_fn(|i| (4 * r + i as u64 + 1) << 32))
                            .collect();
                        let l = Launcher::new(s.clone(), dtype, chunk, bases);
                        let mut rec = Recorder::default();
                        l.issue(&mut rec).unwrap();
                        for c in rec.calls {
                            if let Call::Launch(_, k) = c {
                                out.insert(k.kernel, k.args.len());
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn kernels_compile_for_every_architecture_with_the_launchers_entry_points() {
    let from = match load_nvrtc() {
        Ok(from) => from,
        Err(why) => return missing(&format!("NVRTC is not available ({why})")),
    };
    let version = nvrtc::version().unwrap();
    let supported = nvrtc::supported_archs().unwrap();
    eprintln!("NVRTC {}.{} ({from})", version.0, version.1);
    let launched = launched();
    let expected: BTreeSet<String> = Dtype::ALL
        .into_iter()
        .flat_map(|d| {
            let (v, s) = kernel_names(d);
            [v, s]
        })
        .collect();
    assert_eq!(
        launched.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "the launcher uses every kernel, vectorized and scalar, of every dtype"
    );
    let u64_params = vec![".u64".to_string(); KERNEL_ARGS];
    for arch in ARCHS {
        let name = nvrtc::arch_name(arch);
        if !supported.contains(&(10 * arch.0 + arch.1)) {
            missing(&format!(
                "NVRTC {}.{} does not compile for {name}",
                version.0, version.1
            ));
            continue;
        }
        let ptx = match nvrtc::compile(arch) {
            Ok(ptx) => ptx,
            Err(NvrtcError::Compile { log, .. }) => {
                panic!("{name}: the kernels do not compile:\n{log}")
            }
            Err(e) => panic!("{name}: {e}"),
        };
        assert!(
            ptx.contains(&format!(".target sm_{}{}", arch.0, arch.1)),
            "{name}: PTX for another target"
        );
        let found = entries(&ptx);
        assert_eq!(
            found.keys().cloned().collect::<BTreeSet<_>>(),
            expected,
            "{name}: entry points"
        );
        for (kernel, params) in &found {
            assert_eq!(params, &u64_params, "{name}: parameters of {kernel}");
            assert_eq!(
                launched[kernel],
                params.len(),
                "{name}: {kernel}'s arguments"
            );
        }
    }
}

/// The compute kernels generated for Adam, SGD and bias + dropout + residual compile for every
/// architecture, one entry per element type, each taking `(x, state..., n, index0)`.
#[test]
fn compute_kernels_compile_for_every_architecture() {
    let from = match load_nvrtc() {
        Ok(from) => from,
        Err(why) => return missing(&format!("NVRTC is not available ({why})")),
    };
    let supported = nvrtc::supported_archs().unwrap();
    eprintln!("NVRTC ({from})");
    let computes = [
        Compute {
            program: ADAM.into(),
            scalars: adam_scalars(),
            seed: 0,
        },
        Compute::new(SGD, &[("lr", 0.01)], 0),
        Compute::new(BIAS_DROPOUT_RESIDUAL, &[("prob", 0.1)], 42),
    ];
    let expected: BTreeSet<String> = Dtype::ALL.into_iter().map(compute_kernel_name).collect();
    for c in &computes {
        let kernel = c.kernel().unwrap();
        let source = compute_source(&kernel);
        let params = vec![".u64".to_string(); compute_kernel_args(&kernel)];
        for arch in ARCHS {
            let name = nvrtc::arch_name(arch);
            if !supported.contains(&(10 * arch.0 + arch.1)) {
                missing(&format!("NVRTC does not compile for {name}"));
                continue;
            }
            let ptx = match nvrtc::compile_source(&source, arch) {
                Ok(ptx) => ptx,
                Err(NvrtcError::Compile { log, .. }) => {
                    panic!("{name}: {:?} does not compile:\n{log}\n{source}", c.program)
                }
                Err(e) => panic!("{name}: {e}"),
            };
            let found = entries(&ptx);
            assert_eq!(
                found.keys().cloned().collect::<BTreeSet<_>>(),
                expected,
                "{name}: entry points of {:?}",
                c.program
            );
            for (k, p) in &found {
                assert_eq!(p, &params, "{name}: parameters of {k} for {:?}", c.program);
            }
            if !c.program.contains("pow") {
                // (libdevice's powf uses FMAs of its own.)
                assert!(
                    !ptx.contains("fma.rn.f32"),
                    "{name}: no contraction into FMAs"
                );
            }
        }
    }
}

#[test]
fn compile_errors_name_the_architecture() {
    if load_nvrtc().is_err() {
        return; // reported by the test above
    }
    match nvrtc::compile((1, 0)) {
        Err(NvrtcError::Compile { arch, summary, .. }) => {
            assert_eq!(arch, "compute_10");
            assert!(!summary.is_empty() && !summary.contains('\n'), "{summary}");
        }
        other => panic!("compute_10 is no architecture: {other:?}"),
    }
}

#[test]
fn ptx_entries_are_read_with_their_parameters() {
    let ptx = ".version 8.8\n.target sm_90\n\n.visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u32 k_param_1\n)\n{\n}\n.visible .entry none()\n{\n}\n";
    let e = entries(ptx);
    assert_eq!(e["k"], vec![".u64", ".u32"]);
    assert_eq!(e["none"], Vec::<String>::new());
    assert_eq!(e.len(), 2);
}
