// Where the cluster manager may call a node manager. A node's heartbeat advertises the URL of its
// API (api_url), but a node token must not be able to point the manager — which sends the
// node-API token ([nodes] api_token) with every call — at any host it likes. So the manager
// trusts only the connection: it calls the heartbeat's source address with the advertised port.
// An advertised host that differs from the source address is taken only when it is an IP
// address inside one of `[nodes] api_networks` (CIDRs an operator lists, for nodes behind NAT or
// with a separate management network); a host name is never resolved and never trusted.
//
// IP addresses are handled as 16 bytes, IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d), so that an
// IPv4 peer seen on a dual-stack socket matches its IPv4 network. Pure functions over plain
// values; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flyt::cluster {

using IpBytes = std::array<uint8_t, 16>;

// "10.1.2.3", "::1", "::ffff:10.1.2.3", "[fd00::1]": the address; nullopt when not an IP.
std::optional<IpBytes> ParseIp(std::string_view text);
// The address as a URL's host: "10.1.2.3" (IPv4 and IPv4-mapped) or "[fd00::1]".
std::string UrlHost(const IpBytes& ip);

struct IpNetwork {
  IpBytes base{};
  int prefix_bits = 128;  // of the 16-byte form (an IPv4 /8 is 104)
  std::string text;       // as configured
};

// "10.0.0.0/8", "fd00::/8", or one address ("192.168.1.7" = /32, "::1" = /128). Refuses host
// bits set past the prefix ("10.0.0.1/8"): a typo there would trust more than meant.
Result<IpNetwork> ParseIpNetwork(std::string_view cidr);
bool NetworkContains(const IpNetwork& network, const IpBytes& ip);

// An advertised api_url: "http://<host>:<port>" with an optional trailing "/" (the port defaults
// to 80). No user info, path, query or fragment.
struct AdvertisedUrl {
  std::string host;  // as written, brackets of an IPv6 literal removed
  int port = 80;
};
Result<AdvertisedUrl> ParseAdvertisedUrl(std::string_view url);

// Where the manager calls a node, and why there.
struct NodeApiAddress {
  std::string url;     // "" when none can be trusted (no source address known)
  std::string source;  // "source_address", "advertised", "api_networks" or "none"
  std::string note;    // for people: why this address (shown in the node's view)
};

// `peer`: the heartbeat connection's source address ("" when unknown). The advertised host is
// used when it is the peer's own address or an IP address inside `networks`; otherwise the
// peer's address with the advertised port.
NodeApiAddress TrustedNodeApiAddress(const AdvertisedUrl& advertised, std::string_view peer,
                                     const std::vector<IpNetwork>& networks);

}  // namespace flyt::cluster
