# Sourced by check-gpu.sh and headtohead.sh, the GPU machine's two entry points: what both do
# before measuring anything.

# use_carried_ip DIR: when the machine has no `ip`, put DIR/bin (scripts/fetch-iproute2.sh's
# Debian 12 iproute2, carried in .gpu) first on PATH. Sets ip_note to where `ip` comes from ("" when
# there is none).
use_carried_ip() {
  ip_note=""
  if ! command -v ip >/dev/null 2>&1 && [[ -x $1/bin/ip ]]; then
    PATH=$1/bin:$PATH
    ip_note="ip from $1 (fetch-iproute2.sh)"
  elif command -v ip >/dev/null 2>&1; then
    ip_note="ip at $(command -v ip)"
  fi
}

# unset_measured_env: what is measured must not depend on the caller's environment. Unsets the
# NCCL_* variables that change it and lists them in the array unset_env.
unset_measured_env() {
  unset_env=()
  local v
  for v in $(compgen -e); do
    case $v in
      NCCL_TRIM_*|NCCL_SOCKET_NTHREADS|NCCL_NSOCKS_PERTHREAD|NCCL_ALGO|NCCL_PROTO|NCCL_MIN_NCHANNELS| \
      NCCL_MAX_NCHANNELS|NCCL_NET_GDR_LEVEL|NCCL_NET_GDR_READ|NCCL_BUFFSIZE|NCCL_NET|NCCL_NET_PLUGIN)
        unset_env+=("$v"); unset "$v" ;;
    esac
  done
}

# probe_torch OUT LOG: what this machine's $PYTHON has for the run, as one JSON object in OUT
# (python, torch, torch_cuda, cuda_available, gpu, nccl, sklearn; torch_error when torch is missing
# or broken), its stderr in LOG; bounded at 60 s. Returns the probe's exit status.
probe_torch() {
  timeout 60 "$PYTHON" - >"$1" 2>"$2" <<'PY'
import json, platform
d = {"python": platform.python_version()}
try:
    import torch
    d.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if d["cuda_available"]:
        v = torch.cuda.nccl.version()
        d.update(gpu=torch.cuda.get_device_name(0), nccl=".".join(map(str, v)) if isinstance(v, tuple) else str(v))
except Exception as e:  # no torch, or a broken one
    d["torch_error"] = f"{type(e).__name__}: {e}"
try:
    import sklearn
    d["sklearn"] = sklearn.__version__
except Exception:
    d["sklearn"] = None
print(json.dumps(d))
PY
}
