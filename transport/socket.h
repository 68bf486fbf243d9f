// The transport's names for the socket helpers, which live in common/socket.h (low enough for
// the switch emulator too).
#pragma once

#include "common/socket.h"

namespace trim::transport {

using sock::addr_string;
using sock::errno_status;
using sock::Fd;
using sock::make_addr;
using sock::now_ns;
using sock::open_tcp_listener;
using sock::TcpOptions;
using sock::tcp_rto_min_us;
using sock::open_udp;
using sock::parse_host_port;
using sock::random_u64;
using sock::read_some;
using sock::start_tcp_connect;
using sock::tcp_accept;
using sock::tcp_connect_done;
using sock::write_all;
using sock::write_some;

}  // namespace trim::transport
