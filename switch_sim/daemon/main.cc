// trim-switch: the userspace UDP switch daemon (usage: config.cc, design: switch.h).
#include <fmt/format.h>
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>

#include "switch_sim/daemon/config.h"
#include "switch_sim/daemon/switch.h"

int main(int argc, char** argv) {
  using namespace trim::sw::daemon;
  bool help = false;
  trim::Result<Config> cfg = parse_config(argc, argv, &help);
  if (help) {
    std::fputs(usage(), stdout);
    return 0;
  }
  if (!cfg) {
    std::fprintf(stderr, "trim-switch: %s\n", cfg.status().message().c_str());
    return 2;
  }
  // Signals are read from a signalfd in the loop: block them before anything else runs.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // stdout may be a pipe the reader closed
  // The default 50 us timer slack would blur departures at Gbit/s (a 4 KB packet is 33 us
  // at 1 Gbit/s); 1 us keeps the pacing close to the model's schedule.
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

  Switch sw(*cfg);
  trim::Status st = sw.open();
  if (!st.is_ok()) {
    std::fprintf(stderr, "trim-switch: %s\n", st.message().c_str());
    return st.code() == trim::Code::kBadConfig ? 2 : 1;
  }
  if (sw.tun_mode()) {
    // The devices exist, addressed and up, inside their namespaces: ranks may start now.
    std::printf("{\"event\":\"listening\",\"tun\":%zu,\"name\":\"%s\",\"base\":\"%s\"}\n", cfg->tun_netns.size(),
                cfg->tun_name.c_str(), cfg->tun_base_text.c_str());
  } else {
    std::printf("{\"event\":\"listening\",\"port\":%u}\n", static_cast<unsigned>(sw.port()));
  }
  std::fflush(stdout);
  st = sw.run();
  if (!st.is_ok()) {
    std::fprintf(stderr, "trim-switch: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}
