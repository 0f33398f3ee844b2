//! Least-squares alpha and bandwidth from measured times (`synth topo fit`): every
//! observation is `time = hops x alpha + load / scale`, with `load` the time its bytes take
//! at the modelled bandwidth, so `scale` is measured over modelled bandwidth. Residuals are
//! relative, and the fit minimises their squares (small and large sizes count alike).

use thiserror::Error;

/// One measured time and its model terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Latency hops on the critical path.
    pub hops: f64,
    /// µs the bytes take at the modelled bandwidth.
    pub load_us: f64,
    /// Measured µs.
    pub time_us: f64,
}

/// The fit.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fitted {
    /// Latency per hop in µs (at least 0).
    pub alpha_us: f64,
    /// Measured bandwidth over modelled bandwidth.
    pub scale: f64,
    /// (predicted − measured) / measured, per observation.
    pub residuals: Vec<f64>,
    /// Root mean square of the residuals.
    pub rms: f64,
    /// Largest absolute residual.
    pub max: f64,
}

/// Why no fit.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum FitError {
    /// Too few or degenerate observations.
    #[error("cannot fit: {0}")]
    Degenerate(String),
}

/// Fits alpha and scale to `obs` by relative least squares; alpha below 0 is clamped to 0
/// (and the scale fitted alone).
pub fn fit(obs: &[Observation]) -> Result<Fitted, FitError> {
    if obs.len() < 2 {
        return Err(FitError::Degenerate(format!(
            "{} observations, need 2",
            obs.len()
        )));
    }
    if obs.iter().any(|o| {
        !(o.time_us > 0.0
            && o.load_us >= 0.0
            && o.hops >= 0.0
            && o.time_us.is_finite()
            && o.load_us.is_finite())
    }) {
        return Err(FitError::Degenerate(
            "a time or size that is not positive".to_string(),
        ));
    }
    let (mut saa, mut sab, mut sbb, mut sa, mut sb) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for o in obs {
        let (a, b) = (o.hops / o.time_us, o.load_us / o.time_us);
        saa += a * a;
        sab += a * b;
        sbb += b * b;
        sa += a;
        sb += b;
    }
    let det = saa * sbb - sab * sab;
    let (mut alpha, mut inv) = if det.abs() > 1e-12 * saa * sbb {
        ((sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det)
    } else {
        (-1.0, 0.0)
    };
    if alpha < 0.0 {
        alpha = 0.0;
        inv = sb / sbb;
    }
    if !(inv > 0.0 && inv.is_finite()) {
        return Err(FitError::Degenerate(
            "the times do not grow with the size".to_string(),
        ));
    }
    let residuals: Vec<f64> = obs
        .iter()
        .map(|o| (o.hops * alpha + o.load_us * inv - o.time_us) / o.time_us)
        .collect();
    let rms = (residuals.iter().map(|r| r * r).sum::<f64>() / residuals.len() as f64).sqrt();
    let max = residuals.iter().fold(0.0f64, |m, r| m.max(r.abs()));
    Ok(Fitted {
        alpha_us: alpha,
        scale: 1.0 / inv,
        residuals,
        rms,
        max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_alpha_and_scale() {
        let obs: Vec<Observation> = (0..20)
            .map(|i| {
                let load = 2f64.powi(i) * 0.01;
                Observation {
                    hops: 14.0,
                    load_us: load,
                    time_us: 14.0 * 1.7 + load / 0.8,
                }
            })
            .collect();
        let f = fit(&obs).unwrap();
        assert!(
            (f.alpha_us - 1.7).abs() < 1e-9 && (f.scale - 0.8).abs() < 1e-9,
            "{f:?}"
        );
        assert!(f.max < 1e-9);
        assert!(fit(&obs[..1]).is_err());
        let flat: Vec<Observation> = obs
            .iter()
            .map(|o| Observation { time_us: 5.0, ..*o })
            .collect();
        let f = fit(&flat);
        assert!(f.is_err() || f.unwrap().scale > 1e3);
    }
}
