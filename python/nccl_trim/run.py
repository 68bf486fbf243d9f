"""python -m nccl_trim.run [torchrun options] [nccl_trim options] train.py [script args]

torchrun, with the plugin's NCCL settings (nccl_trim.env()) in every worker's environment and the
RHT hook installed on every DistributedDataParallel the script builds (through the bootstrap
nccl_trim._boot), so a training script runs through nccl-trim unchanged. --trim-cpu also moves the
script's gloo groups to the "trim" backend, so a CPU job's collectives cross the plugin too. See
--help for the options of ours (--no-hook, --trim-*).
"""

import os
import sys

from . import launch_args
from .environment import env


def main(argv=None) -> None:
    try:
        from torch.distributed import run as torchrun
        from torch.distributed.elastic.multiprocessing.errors import record
    except ImportError as e:
        raise SystemExit(f"python -m nccl_trim.run needs torch (torch.distributed.run): {e}") from e
    parser = launch_args.add_options(torchrun.get_args_parser())
    parser.prog = "python -m nccl_trim.run"
    args = parser.parse_args(argv)
    opts = launch_args.take_options(args)
    settings = env(override=opts.override_env, **opts.trim_env)
    os.environ.update(settings)  # the workers inherit the launcher's environment
    print("nccl_trim.run: " + " ".join(f"{k}={v}" for k, v in settings.items())
          + f"; RHT hook {'on' if opts.hook else 'off (--no-hook)'}"
          + ("; gloo groups use the trim backend (--trim-cpu)" if opts.cpu else ""), file=sys.stderr, flush=True)
    launch_args.wrap_worker(args, opts, launch_args.boot_file())
    record(torchrun.run)(args)


if __name__ == "__main__":
    main()
