//! Elementwise compute fused with a collective (CoCoNet): the [`Compute`] a program's
//! [`crate::ir::Op::Compute`] steps apply to the chunks they name, its small expression
//! language, and its evaluation on one element.
//!
//! A compute is a list of statements `name = expr` separated by `;` or line breaks, ending
//! with `out = expr`, the value written back to the buffer. In an expression `x` is the
//! element of the (fully reduced) buffer, a name listed in [`Compute::scalars`] is a
//! per-step scalar (learning rate, step count, ...), and every other name is a state buffer
//! of the output buffer's size on every rank (Adam's `m` and `v`, the parameters `p`, a
//! bias); assigning a state buffer updates its element. Expressions have `+ - * /`, unary
//! minus, parentheses, numbers, `sqrt(e)`, `pow(a, b)` and `dropout(e, prob)`: `e` kept with
//! probability `1 - prob` and scaled by `1 / (1 - prob)`, or 0, by a counter-based hash of
//! ([`Compute::seed`], element index) ([`keep_draw`]), so every executor draws the same mask.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An elementwise computation on the reduced data (JSON field `compute` of a program).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compute {
    /// The statements, as written (see the module documentation).
    pub program: String,
    /// Per-step scalars by name.
    #[serde(default)]
    pub scalars: BTreeMap<String, f64>,
    /// Seed of the dropout mask.
    #[serde(default)]
    pub seed: u64,
}

// Scalars are finite numbers read from text; equality by value is what programs compare.
impl Eq for Compute {}

/// Why a compute does not parse: where (1-based column of the statements' text) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputeError {
    /// The text does not follow the grammar.
    #[error("compute column {column}: expected {expected}, found {found}")]
    Syntax {
        /// 1-based column.
        column: usize,
        /// What the grammar wants there.
        expected: &'static str,
        /// What is there.
        found: String,
    },
    /// A call of a function the language lacks, or with the wrong number of arguments.
    #[error("compute column {column}: {what}")]
    Call {
        /// 1-based column.
        column: usize,
        /// Which function and what is wrong.
        what: String,
    },
    /// A statement assigns `x` or a scalar, or `out` is not the last statement.
    #[error("compute column {column}: cannot assign {name} ({why})")]
    Assign {
        /// 1-based column.
        column: usize,
        /// The name assigned.
        name: String,
        /// Why not.
        why: &'static str,
    },
    /// No `out = ...` statement ends the program.
    #[error("compute: the last statement must be `out = ...` (the value written back)")]
    NoOut,
    /// A scalar is not a finite number.
    #[error("compute: scalar {name} is not a finite number")]
    BadScalar {
        /// The scalar.
        name: String,
    },
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant (or a scalar's value).
    Num(f64),
    /// The buffer's element, `x`.
    X,
    /// State buffer by index into [`Kernel::buffers`].
    Buf(usize),
    /// `-e`.
    Neg(Box<Expr>),
    /// `a op b`.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `sqrt(e)`.
    Sqrt(Box<Expr>),
    /// `pow(a, b)`.
    Pow(Box<Expr>, Box<Expr>),
    /// `dropout(e, prob)`.
    Dropout(Box<Expr>, Box<Expr>),
}

/// What a statement assigns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// A state buffer (index into [`Kernel::buffers`]).
    Buf(usize),
    /// `out`: the value written back.
    Out,
}

/// A parsed [`Compute`]: statements with scalars substituted and state buffers numbered.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// The statements in order; the last assigns [`Target::Out`].
    pub statements: Vec<(Target, Expr)>,
    /// State buffer names, in order of first appearance.
    pub buffers: Vec<String>,
    /// Seed of the dropout mask.
    pub seed: u64,
}

/// Arithmetic an executor computes in (f32, f64).
pub trait Real: Copy + PartialOrd {
    /// From an f64 constant (rounded).
    fn of(v: f64) -> Self;
    /// a op b.
    fn bin(op: BinOp, a: Self, b: Self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// self to the power b.
    fn pow(self, b: Self) -> Self;
    /// The value as f64.
    fn to_f64(self) -> f64;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            fn of(v: f64) -> Self {
                v as $t
            }
            fn bin(op: BinOp, a: Self, b: Self) -> Self {
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                }
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn pow(self, b: Self) -> Self {
                <$t>::powf(self, b)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
real!(f32);
real!(f64);

/// The dropout draw of element `index` under `seed`: 32 uniform bits (splitmix64's
/// finaliser of `seed · φ + index`, top half), the same on every executor.
pub fn keep_draw(seed: u64, index: u64) -> u32 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(index)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 32) as u32
}

impl Compute {
    /// A compute with scalars and seed.
    pub fn new(program: &str, scalars: &[(&str, f64)], seed: u64) -> Compute {
        Compute {
            program: program.to_string(),
            scalars: scalars.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            seed,
        }
    }

    /// Parses the statements.
    pub fn kernel(&self) -> Result<Kernel, ComputeError> {
        if let Some((name, _)) = self.scalars.iter().find(|(_, v)| !v.is_finite()) {
            return Err(ComputeError::BadScalar { name: name.clone() });
        }
        let mut parser = Parser {
            text: self.program.as_bytes(),
            pos: 0,
            scalars: &self.scalars,
            buffers: Vec::new(),
        };
        let statements = parser.statements()?;
        Ok(Kernel {
            statements,
            buffers: parser.buffers,
            seed: self.seed,
        })
    }
}

impl Kernel {
    /// Element streams the kernel moves through memory per element: `x` read, `out`
    /// written, each state buffer read and (if assigned) written.
    pub fn streams(&self) -> usize {
        let written = self
            .statements
            .iter()
            .filter(|(t, _)| matches!(t, Target::Buf(_)))
            .map(|(t, _)| *t)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        2 + self.buffers.len() + written
    }

    /// Evaluates the statements on one element: `x` the buffer's element, `state` the state
    /// buffers' elements (updated), `index` the element's index in the output buffer.
    pub fn apply<R: Real>(&self, x: R, state: &mut [R], index: u64) -> R {
        let mut out = x;
        for (target, e) in &self.statements {
            let v = self.eval(e, x, state, index);
            match target {
                Target::Buf(b) => state[*b] = v,
                Target::Out => out = v,
            }
        }
        out
    }

    fn eval<R: Real>(&self, e: &Expr, x: R, state: &[R], index: u64) -> R {
        let ev = |e: &Expr| self.eval(e, x, state, index);
        match e {
            Expr::Num(v) => R::of(*v),
            Expr::X => x,
            Expr::Buf(b) => state[*b],
            Expr::Neg(a) => R::bin(BinOp::Sub, R::of(0.0), ev(a)),
            Expr::Bin(op, a, b) => R::bin(*op, ev(a), ev(b)),
            Expr::Sqrt(a) => ev(a).sqrt(),
            Expr::Pow(a, b) => ev(a).pow(ev(b)),
            Expr::Dropout(a, p) => {
                let (v, p) = (ev(a), ev(p));
                // Kept when the draw is at least prob · 2^32.
                let draw = R::of(keep_draw(self.seed, index) as f64 / 4_294_967_296.0);
                if draw < p {
                    R::of(0.0)
                } else {
                    R::bin(BinOp::Div, v, R::bin(BinOp::Sub, R::of(1.0), p))
                }
            }
        }
    }
}

/// A recursive-descent parser over the statements' bytes.
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    scalars: &'a BTreeMap<String, f64>,
    buffers: Vec<String>,
}

impl Parser<'_> {
    fn skip_blanks(&mut self) {
        while self.pos < self.text.len() && matches!(self.text[self.pos], b' ' | b'\t' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_blanks();
        self.text.get(self.pos).copied()
    }

    fn found(&self) -> String {
        match self.text.get(self.pos) {
            None => "the end".into(),
            Some(b'\n') => "a line break".into(),
            Some(c) => format!("'{}'", *c as char),
        }
    }

    fn fail(&self, expected: &'static str) -> ComputeError {
        ComputeError::Syntax {
            column: self.pos + 1,
            expected,
            found: self.found(),
        }
    }

    fn expect(&mut self, c: u8, expected: &'static str) -> Result<(), ComputeError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.fail(expected))
        }
    }

    fn name(&mut self) -> Option<String> {
        self.skip_blanks();
        let start = self.pos;
        while self.pos < self.text.len()
            && (self.text[self.pos].is_ascii_alphanumeric() || self.text[self.pos] == b'_')
        {
            if self.pos == start && self.text[self.pos].is_ascii_digit() {
                return None;
            }
            self.pos += 1;
        }
        (self.pos > start).then(|| String::from_utf8_lossy(&self.text[start..self.pos]).into())
    }

    fn buffer(&mut self, name: &str) -> usize {
        match self.buffers.iter().position(|b| b == name) {
            Some(i) => i,
            None => {
                self.buffers.push(name.to_string());
                self.buffers.len() - 1
            }
        }
    }

    fn statements(&mut self) -> Result<Vec<(Target, Expr)>, ComputeError> {
        let mut out = Vec::new();
        loop {
            while matches!(self.peek(), Some(b';' | b'\n')) {
                self.pos += 1;
            }
            if self.peek().is_none() {
                break;
            }
            if matches!(out.last(), Some((Target::Out, _))) {
                return Err(ComputeError::Assign {
                    column: self.pos + 1,
                    name: "after out".into(),
                    why: "`out = ...` must be the last statement",
                });
            }
            let column = self.pos + 1;
            let name = self.name().ok_or_else(|| self.fail("a name to assign"))?;
            let target = match name.as_str() {
                "out" => Target::Out,
                "x" => {
                    return Err(ComputeError::Assign {
                        column,
                        name,
                        why: "x is the collective's data; write it with `out = ...`",
                    })
                }
                n if self.scalars.contains_key(n) => {
                    return Err(ComputeError::Assign {
                        column,
                        name,
                        why: "it is a per-step scalar",
                    })
                }
                n => Target::Buf(self.buffer(n)),
            };
            self.expect(b'=', "'='")?;
            let e = self.sum()?;
            out.push((target, e));
            match self.peek() {
                None | Some(b';' | b'\n') => {}
                Some(_) => return Err(self.fail("an operator, ';' or the end")),
            }
        }
        match out.last() {
            Some((Target::Out, _)) => Ok(out),
            _ => Err(ComputeError::NoOut),
        }
    }

    fn sum(&mut self) -> Result<Expr, ComputeError> {
        let mut e = self.product()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.pos += 1;
            let op = if c == b'+' { BinOp::Add } else { BinOp::Sub };
            e = Expr::Bin(op, Box::new(e), Box::new(self.product()?));
        }
        Ok(e)
    }

    fn product(&mut self) -> Result<Expr, ComputeError> {
        let mut e = self.unary()?;
        while let Some(c @ (b'*' | b'/')) = self.peek() {
            self.pos += 1;
            let op = if c == b'*' { BinOp::Mul } else { BinOp::Div };
            e = Expr::Bin(op, Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr, ComputeError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, ComputeError> {
        match self.peek() {
            Some(b'(') => {
                self.pos += 1;
                let e = self.sum()?;
                self.expect(b')', "')'")?;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let column = self.pos + 1;
                let name = self.name().expect("starts with a letter");
                if self.peek() == Some(b'(') {
                    self.pos += 1;
                    return self.call(column, &name);
                }
                Ok(match name.as_str() {
                    "x" => Expr::X,
                    "out" => {
                        return Err(ComputeError::Assign {
                            column,
                            name,
                            why: "out is written, never read",
                        })
                    }
                    n => match self.scalars.get(n) {
                        Some(v) => Expr::Num(*v),
                        None => Expr::Buf(self.buffer(n)),
                    },
                })
            }
            _ => Err(self.fail("a number, a name, '(' or '-'")),
        }
    }

    fn number(&mut self) -> Result<Expr, ComputeError> {
        let start = self.pos;
        while self.pos < self.text.len()
            && (self.text[self.pos].is_ascii_digit() || self.text[self.pos] == b'.')
        {
            self.pos += 1;
        }
        if self.pos < self.text.len() && matches!(self.text[self.pos], b'e' | b'E') {
            self.pos += 1;
            if self.pos < self.text.len() && matches!(self.text[self.pos], b'+' | b'-') {
                self.pos += 1;
            }
            while self.pos < self.text.len() && self.text[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
        }
        let text = String::from_utf8_lossy(&self.text[start..self.pos]);
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Expr::Num(v)),
            _ => {
                self.pos = start;
                Err(self.fail("a number"))
            }
        }
    }

    fn call(&mut self, column: usize, name: &str) -> Result<Expr, ComputeError> {
        let mut args = vec![self.sum()?];
        while self.peek() == Some(b',') {
            self.pos += 1;
            args.push(self.sum()?);
        }
        self.expect(b')', "')' or ','")?;
        let want = match name {
            "sqrt" => 1,
            "pow" | "dropout" => 2,
            _ => {
                return Err(ComputeError::Call {
                    column,
                    what: format!("unknown function {name} (there are sqrt, pow, dropout)"),
                })
            }
        };
        if args.len() != want {
            return Err(ComputeError::Call {
                column,
                what: format!("{name} takes {want} argument(s), not {}", args.len()),
            });
        }
        let mut args = args.into_iter().map(Box::new);
        let mut next = || args.next().expect("counted");
        Ok(match name {
            "sqrt" => Expr::Sqrt(next()),
            "pow" => Expr::Pow(next(), next()),
            _ => Expr::Dropout(next(), next()),
        })
    }
}

/// Adam's update of parameters `p` with moments `m`, `v` from the gradient `x`; writes the
/// new parameters (scalars `lr`, `beta1`, `beta2`, `eps`, `step`).
pub const ADAM: &str = "m = beta1 * m + (1 - beta1) * x; \
v = beta2 * v + (1 - beta2) * x * x; \
p = p - lr * (m / (1 - pow(beta1, step))) / (sqrt(v / (1 - pow(beta2, step))) + eps); \
out = p";

/// Plain SGD: `p -= lr · x`, writes the new parameters (scalar `lr`).
pub const SGD: &str = "p = p - lr * x; out = p";

/// Tensor parallelism's epilogue: bias add, dropout, residual add (scalar `prob`).
pub const BIAS_DROPOUT_RESIDUAL: &str = "out = dropout(x + bias, prob) + residual";

/// The statements and default scalars of an epilogue: a preset by name (`adam`, `sgd`,
/// `bias-dropout-residual`), or statements (text with `=`) as written with no defaults;
/// `None` for any other name. `synth fuse` and the DSL's `.compute(...)` read it.
pub fn epilogue(text: &str) -> Option<(String, BTreeMap<String, f64>)> {
    let scalars = |list: &[(&str, f64)]| list.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    match text {
        "adam" => Some((ADAM.into(), adam_scalars())),
        "sgd" => Some((SGD.into(), scalars(&[("lr", 0.01)]))),
        "bias-dropout-residual" => Some((BIAS_DROPOUT_RESIDUAL.into(), scalars(&[("prob", 0.1)]))),
        text if text.contains('=') => Some((text.into(), BTreeMap::new())),
        _ => None,
    }
}

/// The default scalars of [`ADAM`].
pub fn adam_scalars() -> BTreeMap<String, f64> {
    [
        ("lr", 1e-3),
        ("beta1", 0.9),
        ("beta2", 0.999),
        ("eps", 1e-8),
        ("step", 1.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adam_parses_with_three_state_buffers_and_matches_by_hand() {
        let c = Compute {
            program: ADAM.into(),
            scalars: adam_scalars(),
            seed: 0,
        };
        let k = c.kernel().unwrap();
        assert_eq!(k.buffers, vec!["m", "v", "p"]);
        let mut state = [0.5f64, 0.25, 2.0];
        let out = k.apply(3.0, &mut state, 0);
        let m = 0.9 * 0.5 + (1.0 - 0.9) * 3.0;
        let v = 0.999 * 0.25 + (1.0 - 0.999) * 3.0 * 3.0;
        let p = 2.0
            - 1e-3 * (m / (1.0 - 0.9f64.powf(1.0)))
                / ((v / (1.0 - 0.999f64.powf(1.0))).sqrt() + 1e-8);
        assert_eq!((state[0], state[1]), (m, v));
        assert!((out - p).abs() < 1e-12 && state[2] == out);
    }

    #[test]
    fn dropout_keeps_about_one_minus_prob_and_is_deterministic() {
        let c = Compute::new(BIAS_DROPOUT_RESIDUAL, &[("prob", 0.25)], 7);
        let k = c.kernel().unwrap();
        let kept = (0..10_000u64)
            .filter(|&i| k.apply(1.0f32, &mut [0.0, 0.0], i) != 0.0)
            .count();
        assert!((7_000..8_000).contains(&kept), "{kept}");
        let a: Vec<f32> = (0..64).map(|i| k.apply(1.0, &mut [1.0, 2.0], i)).collect();
        let b: Vec<f32> = (0..64).map(|i| k.apply(1.0, &mut [1.0, 2.0], i)).collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|&v| v == 2.0 || v == 2.0 + 2.0 / 0.75));
    }

    #[test]
    fn malformed_statements_are_one_line_errors_with_a_column() {
        let bad = [
            ("out = ", "column 7"),
            ("out = x +* 2", "column 10"),
            ("out = sqr(x)", "unknown function sqr"),
            ("out = pow(x)", "pow takes 2"),
            ("x = 1; out = x", "cannot assign x"),
            ("m = x", "last statement must be `out"),
            ("out = x; m = 1", "must be the last"),
            ("out = (x", "expected ')'"),
            ("out = x 2", "expected an operator"),
            ("out = out", "out is written"),
            ("lr = 1; out = x", "per-step scalar"),
            ("out = 1e", "a number"),
        ];
        for (text, want) in bad {
            let c = Compute::new(text, &[("lr", 0.1)], 0);
            let e = c.kernel().unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n') && e.len() <= 300, "{e}");
        }
        let nan = Compute::new("out = x", &[("lr", f64::NAN)], 0);
        assert!(matches!(nan.kernel(), Err(ComputeError::BadScalar { .. })));
    }
}
