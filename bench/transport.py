"""Transport goodput on loopback against a yardstick: trim-harness sendrecv (one connection; --mtu
auto: the plugin's default, 65535 to a peer on this host; 9000: jumbo frames) next to one iperf3 TCP
stream (5 s), "ratio: X" (harness / iperf3 Gbit/s), then a 4-rank ring AllReduce. Prints each JSON
result."""

import json
import sys

from .codec import built, harness, iperf3, options, parser, positive


def main(argv):
    ap = options(parser("transport", __doc__)[1], bytes="256M", iters=5, build="build")
    ap.add_argument("--port", type=positive, default=5299, help="iperf3's port")
    ap.add_argument("--mtu", default="auto", help="auto (the plugin's default) or IP packet bytes")
    a = ap.parse_args(argv)
    if not built("transport", a.build, "bin/trim-harness"):
        return 1
    sized = ["--bytes", a.bytes, "--iters", a.iters, "--deadline-s", 600]
    print(f"== trim-harness sendrecv, MTU {a.mtu}, {a.bytes} x {a.iters}", flush=True)
    mtu = [] if a.mtu == "auto" else ["--mtu", a.mtu]
    j, rc, _, _ = harness(a.build, ["--mode", "sendrecv", *mtu, *sized], stderr=None)
    print(json.dumps(j), flush=True)
    if rc:
        print(f"transport: trim-harness failed (exit {rc})", file=sys.stderr)
        return rc
    print("== iperf3, one TCP stream on loopback, 5 s", flush=True)
    r = iperf3(5, a.port)
    if r is None:
        print("transport: iperf3 is not installed (apt-get install iperf3)", file=sys.stderr)
        return 1
    print(json.dumps({"bench": "iperf3", "streams": 1, "gbps": r[0]}))
    print(f"ratio: {j['gbps'] / r[0]:.4f}")
    print(f"== trim-harness allreduce, 4 ranks, {a.bytes}", flush=True)
    j, rc, _, _ = harness(a.build, ["--mode", "allreduce", "--ranks", 4, *sized], stderr=None)
    print(json.dumps(j))
    return rc
