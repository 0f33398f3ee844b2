//! Compiles the reduction kernels ([`super::kernel_source`]) and compute kernels to PTX with NVRTC for a given
//! compute capability. Needs libnvrtc (loaded at run time by name, as the dynamic linker
//! finds it: `LD_LIBRARY_PATH`, the system's library folders, or an already loaded
//! `libnvrtc.so.N`) but no GPU and no driver.

use super::kernel_source;
use cudarc::nvrtc::{self as rtc, CompileError, CompileOptions};

/// Why the kernels could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvrtcError {
    /// libnvrtc could not be loaded.
    #[error("NVRTC (libnvrtc.so) could not be loaded: add the folder that holds it (the CUDA toolkit's lib64) to LD_LIBRARY_PATH")]
    Missing,
    /// NVRTC answered with an error outside compilation.
    #[error("NVRTC failed: {0}")]
    Call(String),
    /// The source does not compile for `arch`.
    #[error("NVRTC failed to compile the kernels for {arch}: {summary}")]
    Compile {
        /// `compute_XY`.
        arch: String,
        /// The log's first error line.
        summary: String,
        /// NVRTC's whole log.
        log: String,
    },
}

/// Whether libnvrtc can be loaded.
pub fn present() -> bool {
    // SAFETY: only tries to open the shared library.
    unsafe { rtc::sys::is_culib_present() }
}

/// The loaded NVRTC's version (major, minor).
pub fn version() -> Result<(i32, i32), NvrtcError> {
    if !present() {
        return Err(NvrtcError::Missing);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; both pointers are valid.
    unsafe { rtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| NvrtcError::Call(format!("nvrtcVersion: {e}")))?;
    Ok((major, minor))
}

/// The architectures the loaded NVRTC compiles for, as `10 × major + minor` (e.g. 90).
pub fn supported_archs() -> Result<Vec<i32>, NvrtcError> {
    if !present() {
        return Err(NvrtcError::Missing);
    }
    let mut n = 0;
    // SAFETY: the library is present; the pointer is valid.
    unsafe { rtc::sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| NvrtcError::Call(format!("nvrtcGetNumSupportedArchs: {e}")))?;
    let mut archs = vec![0; n.max(0) as usize];
    // SAFETY: `archs` holds the number of entries NVRTC just reported.
    unsafe { rtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| NvrtcError::Call(format!("nvrtcGetSupportedArchs: {e}")))?;
    Ok(archs)
}

/// The `compute_XY` name of a compute capability.
pub fn arch_name((major, minor): (i32, i32)) -> String {
    format!("compute_{major}{minor}")
}

/// PTX of every reduction kernel for compute capability `capability` (major, minor).
pub fn compile(capability: (i32, i32)) -> Result<String, NvrtcError> {
    compile_source(&kernel_source(), capability)
}

/// PTX of CUDA C source (the reduction kernels, or a program's compute kernels from
/// [`super::compute::compute_source`]) for compute capability `capability`, without
/// contracting multiplies and adds into FMAs (so that results equal the CPU executor's).
pub fn compile_source(source: &str, capability: (i32, i32)) -> Result<String, NvrtcError> {
    if !present() {
        return Err(NvrtcError::Missing);
    }
    let arch = arch_name(capability);
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--fmad=false".into()],
        ..Default::default()
    };
    match rtc::compile_ptx_with_opts(source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { nvrtc, log, .. }) => {
            let log = log.to_string_lossy().into_owned();
            let summary = log
                .lines()
                .find(|l| l.contains("error"))
                .or_else(|| log.lines().find(|l| !l.trim().is_empty()))
                .map_or_else(|| format!("{nvrtc}"), |l| l.trim().to_string());
            Err(NvrtcError::Compile { arch, summary, log })
        }
        Err(e) => Err(NvrtcError::Call(format!("{e}"))),
    }
}
