//! The small integer programs of tree packing's schedules (shallow trees, shortcut-ring
//! selection), solved by HiGHS deterministically: one thread, a fixed seed and a limit on
//! branch-and-bound nodes, so the answer is a function of the model, whatever the load.

use anyhow::Result;
use good_lp::solvers::highs::HighsProblem;
use good_lp::{Constraint, SolverModel};
use highs::{HighsModelStatus, HighsSolutionStatus};

/// Solves `model` with `constraints` within `max_nodes` branch-and-bound nodes; the
/// values of its columns, in order, or `None` when no feasible solution was found.
pub fn solve(
    mut model: HighsProblem,
    constraints: Vec<Constraint>,
    max_nodes: i32,
) -> Result<Option<Vec<f64>>> {
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
        .try_set_option("mip_max_nodes", max_nodes)
        .map_err(option)?;
    let solved = model
        .try_solve()
        .map_err(|e| anyhow::anyhow!("HiGHS failed: {e:?}"))?;
    let found = matches!(
        solved.status(),
        HighsModelStatus::Optimal
            | HighsModelStatus::ReachedSolutionLimit
            | HighsModelStatus::ReachedIterationLimit
    ) && solved.primal_solution_status() == HighsSolutionStatus::Feasible;
    Ok(found.then(|| solved.get_solution().columns().to_vec()))
}
