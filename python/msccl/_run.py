"""`python3 -m msccl._run SCRIPT ARGS...`: runs an MSCCLang script the way `python3 SCRIPT`
would, with the recorder installed first, so even a syntax error becomes one line."""

import os
import runpy
import sys

import msccl.language as _language


def _main():
    if len(sys.argv) < 2:
        sys.exit("usage: python3 -m msccl._run SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    _language._SCRIPT = os.path.abspath(script)
    runpy.run_path(script, run_name="__main__")


_main()
