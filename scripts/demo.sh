#!/usr/bin/env bash
# make demo: run the codec demonstration and plot it.
set -euo pipefail
build=${1:-build}
out="$build/demo"
"$build/bin/trim-demo" --out "$out"
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot -e "datafile='$out/codec_nmse.dat'; outfile='$out/codec_nmse.png'" scripts/plot_demo.gp
  echo "plot: $out/codec_nmse.png"
else
  echo "gnuplot not found: no plot (scripts/setup.sh installs gnuplot-nox)" >&2
fi
