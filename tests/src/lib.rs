//! End-to-end and conformance tests live in `tests/tests/`.
