//! Graphviz rendering of a topology.

use super::model::Topology;
use std::fmt::Write;

/// Most parallel strokes drawn for one link; beyond this the label carries the multiplicity.
const MAX_STROKES: u32 = 6;

impl Topology {
    /// Graphviz `digraph` text: one node per rank (grouped in a cluster per node when there
    /// are several), one edge per link labelled with its GB/s (a link pair with equal
    /// bandwidth both ways is drawn once with arrows at both ends), drawn with as many
    /// parallel strokes as its integer capacity (up to 6). Switch constraints are listed
    /// as comments.
    pub fn to_dot(&self) -> String {
        let caps = self.capacities().ok();
        let mut out = String::new();
        let _ = writeln!(out, "digraph \"{}\" {{", self.name.replace('"', "'"));
        let _ = writeln!(out, "  node [shape=circle];");
        let nodes = self.nodes();
        for n in 0..nodes.max(1) {
            let ranks: Vec<usize> = (0..self.ranks).filter(|&r| self.node_of[r] == n).collect();
            if nodes > 1 {
                let _ = writeln!(out, "  subgraph cluster_{n} {{\n    label=\"node {n}\";");
            }
            for r in ranks {
                let _ = writeln!(out, "    {r} [label=\"{r}\"];");
            }
            if nodes > 1 {
                let _ = writeln!(out, "  }}");
            }
        }
        for (i, l) in self.links.iter().enumerate() {
            let back = self.link(l.dst, l.src);
            let both = back.is_some_and(|b| b.bandwidth == l.bandwidth);
            if both && l.src > l.dst {
                continue;
            }
            let mut attrs = vec![format!("label=\"{} GB/s\"", trim(l.bandwidth))];
            if both {
                attrs.push("dir=both".into());
            }
            if let Some(c) = &caps {
                let k = c.links[i].clamp(1, MAX_STROKES);
                if k > 1 {
                    attrs.push(format!(
                        "color=\"{}\"",
                        vec!["black"; k as usize].join(":white:")
                    ));
                }
            }
            let _ = writeln!(out, "  {} -> {} [{}];", l.src, l.dst, attrs.join(", "));
        }
        for s in &self.switches {
            let _ = writeln!(
                out,
                "  // switch {}: {:?} -> {:?} shares {} GB/s",
                s.name,
                s.srcs,
                s.dsts,
                trim(s.bandwidth)
            );
        }
        out.push_str("}\n");
        out
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use crate::topology::generators::{generate, GenSize};

    #[test]
    fn ring_dot() {
        let d = generate("ring", GenSize::Ranks(3), 25.0, 0.7)
            .unwrap()
            .to_dot();
        assert!(d.starts_with("digraph \"ring:3\""));
        assert_eq!(d.matches("dir=both").count(), 3);
        assert!(d.contains("label=\"25 GB/s\""));
    }
}
