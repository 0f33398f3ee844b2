//! `synth catalog --deploy DIR`: a catalog's XML files in a folder of their own, the exact
//! environment that makes the runtime load them (`env.sh`), and a lint of every file and
//! setting against the runtime's rules (msccl-ir.md §2: the NCCL executor, RCCL, the legacy
//! runtime), with the sizes that fall back to NCCL (`deploy.json`).
//!
//! Settings per flavour:
//!
//! | flavour | settings |
//! | --- | --- |
//! | nccl (msccl-executor-nccl) | `NCCL_MSCCL_ENABLE=1`, `MSCCL_ALGO_DIR=DIR/algos`, `NCCL_MAX_NCHANNELS` (if set) ≥ the files' channels, one rank per process |
//! | rccl | `RCCL_MSCCL_ENABLE=1`, `RCCL_MSCCL_FORCE_ENABLE=1`, `MSCCL_ALGO_DIR=DIR/algos`, `NCCL_MAX_NCHANNELS` (if set) ≥ the files' channels, one rank per process |
//! | legacy (microsoft/msccl) | `NCCL_ALGO=MSCCL,RING,TREE`, `MSCCL_XML_FILES` (at most 4 files) or `MSCCL_CONFIG=DIR/msccl_config.xml`, one rank per process |

use super::Manifest;
use anyhow::{anyhow, bail, Context, Result};
use runtime::ir::{Collective as IrCollective, Flavor, Program};
use runtime::limits::Limits;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Most files `MSCCL_XML_FILES` takes (the legacy runtime).
pub const LEGACY_MAX_XML_FILES: usize = 4;

/// One environment setting a runtime needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    /// Variable name.
    pub var: String,
    /// Value to export.
    pub value: String,
    /// Why the runtime needs it.
    pub why: String,
    /// A lower bound rather than a value: `env.sh` raises the variable only where it is set
    /// below `value` (`NCCL_MAX_NCHANNELS`: lowering it would cost NCCL's own algorithms).
    pub minimum: bool,
}

/// One lint finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The file (relative to the deploy folder) or `environment`.
    pub subject: String,
    /// What is wrong.
    pub problem: String,
}

/// Sizes of one collective and buffer mode that no file serves (NCCL runs there).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fallback {
    /// Collective.
    pub collective: String,
    /// In place or out of place.
    pub inplace: bool,
    /// Inclusive `[min, max]` byte ranges (max 0 = unlimited) NCCL serves.
    pub ranges: Vec<[u64; 2]>,
}

impl Fallback {
    /// `COLL in place: NCCL runs [a, b], ...` (or `no size`), as the deploy files and the
    /// command's summary say it.
    pub fn describe(&self) -> String {
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|&[a, b]| match b {
                0 => format!("[{a}, ∞]"),
                b => format!("[{a}, {b}]"),
            })
            .collect();
        format!(
            "{} {}: NCCL runs {}",
            self.collective,
            if self.inplace {
                "in place"
            } else {
                "out of place"
            },
            if ranges.is_empty() {
                "no size".to_string()
            } else {
                ranges.join(", ")
            }
        )
    }
}

/// What `--deploy` wrote (`deploy.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Deployment {
    /// The runtime flavour.
    pub flavor: String,
    /// The folder of XML files.
    pub algo_dir: String,
    /// Files, relative to the deploy folder.
    pub files: Vec<String>,
    /// Settings, in `env.sh` order.
    pub settings: Vec<Setting>,
    /// Channels the files use at most.
    pub max_channels: usize,
    /// Per collective and buffer mode, the sizes left to NCCL.
    pub falls_back_to_nccl: Vec<Fallback>,
    /// Lint findings; empty when every file and setting passes.
    pub findings: Vec<Finding>,
}

/// Deploys the catalog `manifest` written in `catalog_dir` into `dir`.
pub fn deploy(manifest: &Manifest, catalog_dir: &Path, dir: &Path) -> Result<Deployment> {
    let flavor = Flavor::from_name(&manifest.flavor)
        .ok_or_else(|| anyhow!("catalog flavour '{}' is unknown", manifest.flavor))?;
    let algos = dir.join(super::ALGO_DIR);
    if algos.exists()
        && std::fs::read_dir(&algos)
            .with_context(|| format!("{}: cannot read", algos.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{}: not empty; the runtime parses every file there, so --deploy needs a folder of its own",
            algos.display()
        );
    }
    std::fs::create_dir_all(&algos)
        .with_context(|| format!("{}: cannot create", algos.display()))?;
    let abs =
        std::fs::canonicalize(dir).with_context(|| format!("{}: cannot resolve", dir.display()))?;
    let mut files = Vec::new();
    let mut programs = Vec::new();
    for c in &manifest.collectives {
        for r in &c.ranges {
            for rel in std::iter::once(&r.file).chain(r.file_inplace.as_ref()) {
                let from = catalog_dir.join(rel);
                let name = Path::new(rel)
                    .file_name()
                    .ok_or_else(|| anyhow!("{rel}: no file name"))?;
                let to = algos.join(name);
                std::fs::copy(&from, &to)
                    .with_context(|| format!("{}: cannot copy", from.display()))?;
                let rel_to = format!("{}/{}", super::ALGO_DIR, name.to_string_lossy());
                files.push(rel_to.clone());
                programs.push((rel_to, to));
            }
        }
    }
    let mut findings = Vec::new();
    let mut read = Vec::new();
    for (rel, path) in &programs {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        match runtime::xml::read_str(&text) {
            Ok(p) => {
                findings.extend(lint_file(rel, &text, &p, flavor, manifest.ranks));
                read.push((rel.clone(), p));
            }
            Err(e) => findings.push(Finding {
                subject: rel.clone(),
                problem: format!("does not parse: {e}"),
            }),
        }
    }
    let max_channels = read.iter().map(|(_, p)| p.nchannels()).max().unwrap_or(0);
    let settings = settings(flavor, &abs, &files, max_channels);
    if flavor == Flavor::Legacy && files.len() > LEGACY_MAX_XML_FILES {
        std::fs::write(dir.join("msccl_config.xml"), legacy_config(&read, &abs))
            .with_context(|| format!("{}: cannot write", dir.display()))?;
    }
    findings.extend(lint_environment(&settings, |v| std::env::var(v).ok()));
    let falls_back_to_nccl = coverage(manifest, &read, flavor, &mut findings);
    let deployment = Deployment {
        flavor: manifest.flavor.clone(),
        algo_dir: abs.join(super::ALGO_DIR).display().to_string(),
        files,
        settings,
        max_channels,
        falls_back_to_nccl,
        findings,
    };
    std::fs::write(dir.join("env.sh"), env_sh(&deployment))
        .with_context(|| format!("{}: cannot write", dir.display()))?;
    std::fs::write(
        dir.join("deploy.json"),
        serde_json::to_string_pretty(&deployment)?,
    )
    .with_context(|| format!("{}: cannot write", dir.display()))?;
    Ok(deployment)
}

/// The settings `flavor` needs to load `files` (relative to `dir`) of at most `channels`
/// channels.
pub fn settings(flavor: Flavor, dir: &Path, files: &[String], channels: usize) -> Vec<Setting> {
    let s = |var: &str, value: String, why: &str| Setting {
        var: var.to_string(),
        value,
        why: why.to_string(),
        minimum: var == "NCCL_MAX_NCHANNELS",
    };
    let algo_dir = dir.join(super::ALGO_DIR).display().to_string();
    let channels = channels.max(1).to_string();
    match flavor {
        Flavor::Nccl => vec![
            s(
                "NCCL_MSCCL_ENABLE",
                "1".into(),
                "the executor's MSCCL switch (0 turns every file off)",
            ),
            s(
                "MSCCL_ALGO_DIR",
                algo_dir,
                "the folder the executor parses every file of, in sorted order",
            ),
            s(
                "NCCL_MAX_NCHANNELS",
                channels,
                "at least the files' channels, or the communicator cannot set them up",
            ),
        ],
        Flavor::Rccl => vec![
            s("RCCL_MSCCL_ENABLE", "1".into(), "RCCL's MSCCL switch"),
            s(
                "RCCL_MSCCL_FORCE_ENABLE",
                "1".into(),
                "MSCCL also on machines RCCL's tables do not mark as MSCCL-capable",
            ),
            s(
                "MSCCL_ALGO_DIR",
                algo_dir,
                "the folder RCCL parses every file of",
            ),
            s(
                "NCCL_MAX_NCHANNELS",
                channels,
                "RCCL drops a file with more channels than this",
            ),
        ],
        Flavor::Legacy => {
            let files_var = if files.len() <= LEGACY_MAX_XML_FILES {
                let paths: Vec<String> = files
                    .iter()
                    .map(|f| dir.join(f).display().to_string())
                    .collect();
                s(
                    "MSCCL_XML_FILES",
                    paths.join(":"),
                    "the files the legacy runtime loads (at most 4)",
                )
            } else {
                s(
                    "MSCCL_CONFIG",
                    dir.join("msccl_config.xml").display().to_string(),
                    "the legacy runtime's list of files with their size ranges (more than 4 files)",
                )
            };
            vec![
                s(
                    "NCCL_ALGO",
                    "MSCCL,RING,TREE".into(),
                    "MSCCL is an NCCL algorithm the legacy runtime runs only when listed",
                ),
                files_var,
            ]
        }
    }
}

/// The per-file lint: parses as the flavour, verifies, fits the flavour's limits, carries
/// its size range, matches the fabric's rank count.
fn lint_file(rel: &str, text: &str, p: &Program, flavor: Flavor, ranks: usize) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut bad = |problem: String| {
        out.push(Finding {
            subject: rel.to_string(),
            problem,
        })
    };
    if let Err(e) = runtime::verify::verify(p) {
        bad(format!("does not verify: {e}"));
    }
    if let Err(e) = runtime::xml::writable(p, flavor) {
        bad(e.to_string());
    }
    let limits = Limits::of(flavor);
    for g in &p.gpus {
        if g.threadblocks.len() > limits.max_tbs {
            bad(format!(
                "rank {} has {} threadblocks, the {flavor:?} runtime at most {}",
                g.rank,
                g.threadblocks.len(),
                limits.max_tbs
            ));
        }
        if let Some(tb) = g
            .threadblocks
            .iter()
            .find(|tb| tb.steps.len() > limits.max_steps)
        {
            bad(format!(
                "rank {} has a threadblock of {} steps, the {flavor:?} runtime at most {}",
                g.rank,
                tb.steps.len(),
                limits.max_steps
            ));
        }
    }
    if p.nchannels() > limits.max_channels {
        bad(format!(
            "{} channels, the {flavor:?} runtime at most {}",
            p.nchannels(),
            limits.max_channels
        ));
    }
    if p.ngpus != ranks {
        bad(format!(
            "ngpus {} but the fabric has {ranks} ranks (never selected)",
            p.ngpus
        ));
    }
    if flavor != Flavor::Legacy {
        // Without minBytes/maxBytes the executor's defaults apply, not the catalog's range.
        for attr in ["minBytes", "maxBytes"] {
            if !root_has(text, attr) {
                bad(format!(
                    "no {attr}: the runtime would serve other sizes than the catalog chose"
                ));
            }
        }
    }
    if flavor == Flavor::Legacy
        && p.collective == IrCollective::ReduceScatter
        && !text.contains("reduce_scatter")
    {
        bad(
            "reduce-scatter not named reduce_scatter: the legacy runtime does not know it"
                .to_string(),
        );
    }
    out
}

/// Whether the root element of XML `text` has attribute `attr`.
fn root_has(text: &str, attr: &str) -> bool {
    roxmltree::Document::parse(text).is_ok_and(|d| d.root_element().attribute(attr).is_some())
}

/// The environment lint: a variable the caller's environment (`get`) sets otherwise than
/// the deployment needs.
pub fn lint_environment(
    settings: &[Setting],
    get: impl Fn(&str) -> Option<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for s in settings {
        let Some(now) = get(&s.var) else { continue };
        let ok = match s.var.as_str() {
            _ if s.minimum => now
                .trim()
                .parse::<usize>()
                .is_ok_and(|n| n >= s.value.parse().unwrap_or(0)),
            "NCCL_ALGO" => now
                .to_ascii_uppercase()
                .split(',')
                .any(|a| a.trim() == "MSCCL"),
            _ => now == s.value,
        };
        if !ok {
            out.push(Finding {
                subject: "environment".to_string(),
                problem: format!(
                    "{}={now} is set here; the deployment needs {}={} ({})",
                    s.var, s.var, s.value, s.why
                ),
            });
        }
    }
    out
}

/// Per collective and buffer mode, checks that the files serve exactly the catalog's ranges
/// under the runtime's range rule, and returns the sizes left to NCCL.
fn coverage(
    manifest: &Manifest,
    read: &[(String, Program)],
    flavor: Flavor,
    findings: &mut Vec<Finding>,
) -> Vec<Fallback> {
    let mut out = Vec::new();
    for c in &manifest.collectives {
        for inplace in [false, true] {
            // Intended: every range with a file of this buffer mode.
            let intended: Vec<(u64, u64, &str)> = c
                .ranges
                .iter()
                .filter_map(|r| {
                    let f = if inplace {
                        r.file_inplace.as_deref()?
                    } else {
                        r.file.as_str()
                    };
                    Some((r.min_bytes, r.max_bytes, f))
                })
                .collect();
            let mut served: Vec<[u64; 2]> = Vec::new();
            for (min, max, file) in &intended {
                let name = Path::new(file)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                let Some((rel, p)) = read.iter().find(|(rel, _)| {
                    Some(rel.rsplit('/').next().unwrap_or("").to_string()) == name
                }) else {
                    continue;
                };
                // The file's own range under the runtime's rule, inclusive.
                let (lo, hi) = match flavor {
                    Flavor::Legacy => (p.min_bytes, p.max_bytes.saturating_sub(1)),
                    _ => (
                        p.min_bytes,
                        if p.max_bytes == 0 {
                            u64::MAX
                        } else {
                            p.max_bytes
                        },
                    ),
                };
                let want_hi = if *max == 0 { u64::MAX } else { *max };
                // The legacy writer caps an unlimited range by its scratch (larger calls run
                // NCCL, reported below); any other difference is a wrong file.
                let capped = flavor == Flavor::Legacy && *max == 0;
                if lo > *min || (hi < want_hi && !capped) {
                    findings.push(Finding {
                        subject: rel.clone(),
                        problem: format!(
                            "serves [{lo}, {}] but the catalog chose it for [{min}, {}]",
                            show_max(hi),
                            show_max(want_hi)
                        ),
                    });
                }
                if flavor == Flavor::Legacy && hi < want_hi {
                    // The legacy runtime's scratch cap: larger calls run NCCL.
                    served.push([lo.max(*min), hi]);
                } else {
                    served.push([*min, want_hi]);
                }
            }
            served.sort();
            let mut gaps = Vec::new();
            let mut next = 1u64;
            for [lo, hi] in &served {
                if *lo > next {
                    gaps.push([next, lo - 1]);
                }
                if *hi == u64::MAX {
                    next = u64::MAX;
                    break;
                }
                next = next.max(hi + 1);
            }
            if next != u64::MAX {
                gaps.push([next, 0]);
            }
            out.push(Fallback {
                collective: c.collective.clone(),
                inplace,
                ranges: gaps,
            });
        }
    }
    out
}

fn show_max(x: u64) -> String {
    if x == u64::MAX {
        "unlimited".to_string()
    } else {
        x.to_string()
    }
}

/// The legacy runtime's `MSCCL_CONFIG` file listing every program with its range.
fn legacy_config(read: &[(String, Program)], dir: &Path) -> String {
    let mut t = String::from("<msccl_algos>\n");
    for (rel, p) in read {
        let max = if p.max_bytes == 0 {
            "-1".to_string()
        } else {
            p.max_bytes.to_string()
        };
        t += &format!(
            "  <load path=\"{}\" minbytes=\"{}\" maxbytes=\"{max}\"/>\n",
            dir.join(rel).display(),
            p.min_bytes
        );
    }
    t + "</msccl_algos>\n"
}

/// `env.sh`: the settings as `export` lines, with why, and what the lint found.
fn env_sh(d: &Deployment) -> String {
    let mut t = format!(
        "# synth catalog --deploy: source this before launching one process per GPU ({} runtime).\n",
        d.flavor
    );
    for s in &d.settings {
        if s.minimum {
            t += &format!(
                "# {} (if set, at least {})\n[ \"${{{}:-{}}}\" -ge {} ] || export {}={}\n",
                s.why, s.value, s.var, s.value, s.value, s.var, s.value
            );
        } else {
            t += &format!("# {}\nexport {}={}\n", s.why, s.var, shell_quote(&s.value));
        }
    }
    t += "# Launch one process per GPU (torchrun --nproc-per-node=GPUS, mpirun -np RANKS): the\n# MSCCL runtimes turn MSCCL off where a process drives several GPUs.\n";
    let mut by_coll: BTreeMap<(String, bool), &Fallback> = BTreeMap::new();
    for f in &d.falls_back_to_nccl {
        by_coll.insert((f.collective.clone(), f.inplace), f);
    }
    for f in by_coll.values() {
        t += &format!("# {}\n", f.describe());
    }
    for f in &d.findings {
        t += &format!(
            "# LINT {}: {}\n",
            f.subject,
            crate::util::escape_line_breaks(&f.problem)
        );
    }
    t
}

/// `value` quoted for a POSIX shell.
fn shell_quote(value: &str) -> String {
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-,:=+".contains(c))
    {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

/// Where the deploy folder is: `dir`, checked not to be the catalog folder itself.
pub fn check_dir(dir: &Path, catalog_dir: &Path) -> Result<PathBuf> {
    if dir == catalog_dir {
        bail!("--deploy {}: give a folder other than --out (the catalog's own algos/ holds the same files)", dir.display());
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_lint_names_the_variable() {
        let s = settings(Flavor::Nccl, Path::new("/d"), &[], 8);
        assert_eq!(s[2].value, "8");
        let env = |v: &str| match v {
            "NCCL_MAX_NCHANNELS" => Some("4".to_string()),
            "NCCL_MSCCL_ENABLE" => Some("1".to_string()),
            _ => None,
        };
        let f = lint_environment(&s, env);
        assert_eq!(f.len(), 1);
        assert!(f[0].problem.starts_with("NCCL_MAX_NCHANNELS=4"), "{f:?}");
        let legacy = settings(
            Flavor::Legacy,
            Path::new("/d"),
            &vec!["a".to_string(); 5],
            2,
        );
        assert_eq!(legacy[1].var, "MSCCL_CONFIG");
        let f = lint_environment(&legacy, |v| {
            (v == "NCCL_ALGO").then(|| "ring,tree".to_string())
        });
        assert_eq!(f.len(), 1, "{f:?}");
    }
}
