"""python -m bench <command> [options]: one experiment per command; `--help` after a command for
its options. Without a command: this list."""

import importlib
import sys

# command -> (module, what it runs). One module per experiment; each has main(argv) -> exit status.
COMMANDS = {
    "demo": ("bench.demo", "make demo: DDP through one congested bottleneck, trimming vs Gloo; table, plot, JSON"),
    "congestion": ("bench.congestion", "the congestion head-to-head through the netns bottleneck (presets, --plan)"),
    "congestion-report": ("bench.congestion_report", "tables, plots and goal verdicts of a congestion run folder"),
    "ddp": ("bench.ddp", "N DDP ranks (or the all_reduce bench) over the plugin, Socket or Gloo; sweeps"),
    "ddp-report": ("bench.ddp_report", "summaries, tables and plots of ddp run folders"),
    "alternate": ("bench.alternate", "uncongested DDP configurations alternated round by round, paired medians"),
    "backend": ("bench.backend", "the trim torch.distributed backend vs Gloo: all_reduce busbw and CPU"),
    "codec": ("bench.codec", "codec speed and CPU over worker threads; what encoding costs untrimmed"),
    "transport": ("bench.transport", "trim-harness goodput on loopback vs one iperf3 TCP stream"),
    "fabric": ("bench.fabric", "native vs fabric-mode trimming, and NCCL_TRIM_RX_CUT off vs on"),
    "sim": ("bench.sim", "trim-sim studies: recovery curves, scenario tables, the htsim cross-check"),
    "scenarios": ("bench.scenarios", "the live scenarios: the real plugin through trim-switch"),
    "trim-model": ("bench.trim_model", "offline model of char-LM training through random trims"),
    "gpu": ("bench.gpu", "the GPU machine's one command: bounded steps, a table, one JSON line, a bundle"),
    "gpu-report": ("bench.gpu_report", "the verdicts of a GPU check's results folder"),
}


def usage(out=None):
    out = out or sys.stdout
    print("usage: python -m bench <command> [options]\n\ncommands:", file=out)
    for name, (_, what) in COMMANDS.items():
        print(f"  {name:<18} {what}", file=out)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        usage()
        return 0
    if argv[0] not in COMMANDS:
        print(f"bench: unknown command '{argv[0]}'", file=sys.stderr)
        usage(sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
