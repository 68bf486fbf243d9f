#!/usr/bin/env bash
# The GPU machine's one command (docs/GPU-MACHINE.md): python3 -m bench gpu, options in its --help.
cd "$(dirname "$0")/.." && exec "${PYTHON:-python3}" -m bench gpu "$@"
