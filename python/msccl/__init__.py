"""A pure-Python front end for MSCCLang programs, compiled by synth.

`from msccl.language import *` gives the names MSCCLang programs use. The package only
records a program's chunk operations; synth (written in Rust) compiles, checks and verifies
them. See the README section "Hand-written algorithms (MSCCLang)".
"""
