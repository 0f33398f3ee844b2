//! The small integer programs of tree packing's schedules (shallow trees, shortcut-ring
//! selection), solved by HiGHS deterministically: one thread, a fixed seed, a limit on
//! branch-and-bound nodes and one on simplex iterations, so the answer is a function of the
//! model, whatever the machine or its load.

use anyhow::Result;
use good_lp::solvers::highs::HighsProblem;
use good_lp::{Constraint, SolverModel};
use highs::{HighsModelStatus, HighsSolutionStatus};
use std::os::raw::{c_char, c_int, c_void};

/// How much work one solve may take: both are counts, never times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effort {
    /// Branch-and-bound nodes.
    pub nodes: i32,
    /// Simplex iterations over the whole solve (every node's LPs, cuts and heuristics).
    /// A node can cost thousands of them where a packing is tight (a 3×10 torus: 107,000
    /// in 43 nodes), so the node limit alone does not bound the work.
    pub lp_iterations: i64,
}

/// A solve's answer and the simplex iterations it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Solved {
    /// The values of the model's columns, in order, or `None` when no feasible solution
    /// was found within the effort.
    pub columns: Option<Vec<f64>>,
    /// Simplex iterations used.
    pub lp_iterations: i64,
}

/// Solves `model` with `constraints` within `effort`.
pub fn solve(
    mut model: HighsProblem,
    constraints: Vec<Constraint>,
    effort: Effort,
) -> Result<Solved> {
    for c in constraints {
        model.add_constraint(c);
    }
    let mut model = model
        .try_into_inner()
        .map_err(|e| anyhow::anyhow!("HiGHS could not build the model: {e}"))?;
    let option = |e| anyhow::anyhow!("HiGHS option: {e:?}");
    model.try_set_option("threads", 1).map_err(option)?;
    model.try_set_option("random_seed", 0).map_err(option)?;
    model
        .try_set_option("mip_max_nodes", effort.nodes)
        .map_err(option)?;
    // Read by `stop_past_budget` during the solve: it lives until the solve returns.
    let budget: i64 = effort.lp_iterations;
    // SAFETY: `model.as_mut_ptr()` is the live HiGHS instance `try_solve` runs; the callback
    // only reads the callback data HiGHS passes and `budget`, which outlives the solve.
    let set = unsafe {
        highs_sys::Highs_setCallback(
            model.as_mut_ptr(),
            Some(stop_past_budget),
            &budget as *const i64 as *mut c_void,
        ) == highs_sys::kHighsStatusOk
            && highs_sys::Highs_startCallback(
                model.as_mut_ptr(),
                highs_sys::kHighsCallbackMipInterrupt,
            ) == highs_sys::kHighsStatusOk
    };
    if !set {
        anyhow::bail!("HiGHS refused the MIP interrupt callback");
    }
    let solved = model
        .try_solve()
        .map_err(|e| anyhow::anyhow!("HiGHS failed: {e:?}"))?;
    let found = matches!(
        solved.status(),
        HighsModelStatus::Optimal
            | HighsModelStatus::ReachedSolutionLimit
            | HighsModelStatus::ReachedIterationLimit
            | HighsModelStatus::ReachedInterrupt
    ) && solved.primal_solution_status() == HighsSolutionStatus::Feasible;
    Ok(Solved {
        columns: found.then(|| solved.get_solution().columns().to_vec()),
        lp_iterations: solved.simplex_iteration_count(),
    })
}

/// HiGHS's MIP interrupt callback: stops the solve once its simplex iterations reach the
/// budget `user_data` points to.
unsafe extern "C" fn stop_past_budget(
    _kind: c_int,
    _message: *const c_char,
    out: *const highs_sys::HighsCallbackDataOut,
    input: *mut highs_sys::HighsCallbackDataIn,
    user_data: *mut c_void,
) {
    // SAFETY: HiGHS passes valid data pointers for the callback's duration, and `user_data`
    // is the `budget` of `solve`, alive while the solve runs.
    unsafe {
        if out.is_null() || input.is_null() || user_data.is_null() {
            return;
        }
        let budget = *(user_data as *const i64);
        if (*out).mip_total_lp_iterations >= budget {
            (*input).user_interrupt = 1;
        }
    }
}
