#include "cluster/node_address.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/strings.h"

namespace flyt::cluster {

std::optional<IpBytes> ParseIp(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  if (text.empty() || text.size() > 64) return std::nullopt;
  const std::string s(text);
  IpBytes out{};
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    out[10] = 0xff;
    out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return out;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(out.data(), &v6, 16);
    return out;
  }
  return std::nullopt;
}

namespace {
bool IsV4Mapped(const IpBytes& ip) {
  for (int i = 0; i < 10; ++i) {
    if (ip[i] != 0) return false;
  }
  return ip[10] == 0xff && ip[11] == 0xff;
}
}  // namespace

std::string UrlHost(const IpBytes& ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (IsV4Mapped(ip)) {
    inet_ntop(AF_INET, ip.data() + 12, buf, sizeof(buf));
    return buf;
  }
  inet_ntop(AF_INET6, ip.data(), buf, sizeof(buf));
  return "[" + std::string(buf) + "]";
}

Result<IpNetwork> ParseIpNetwork(std::string_view cidr) {
  const std::string what = "network \"" + std::string(cidr) + "\"";
  IpNetwork n;
  n.text = std::string(cidr);
  const size_t slash = cidr.find('/');
  auto ip = ParseIp(cidr.substr(0, slash));
  if (!ip) return InvalidArgument(what + " is not an IP address or CIDR (like 10.0.0.0/8)");
  const bool v4 = IsV4Mapped(*ip) && cidr.substr(0, slash).find(':') == std::string_view::npos;
  const int max_bits = v4 ? 32 : 128;
  int bits = max_bits;
  if (slash != std::string_view::npos) {
    auto b = ParseUint(cidr.substr(slash + 1));
    if (!b || *b > static_cast<uint64_t>(max_bits)) {
      return InvalidArgument(what + ": the prefix length must be 0-" + std::to_string(max_bits));
    }
    bits = static_cast<int>(*b);
  }
  n.base = *ip;
  n.prefix_bits = v4 ? 96 + bits : bits;
  for (int i = n.prefix_bits; i < 128; ++i) {
    if (n.base[i / 8] & (0x80 >> (i % 8))) {
      return InvalidArgument(what + " has address bits set past its prefix length");
    }
  }
  return n;
}

bool NetworkContains(const IpNetwork& network, const IpBytes& ip) {
  for (int i = 0; i < network.prefix_bits; ++i) {
    const uint8_t mask = static_cast<uint8_t>(0x80 >> (i % 8));
    if ((network.base[i / 8] & mask) != (ip[i / 8] & mask)) return false;
  }
  return true;
}

Result<AdvertisedUrl> ParseAdvertisedUrl(std::string_view url) {
  const std::string what = "api_url \"" + std::string(url) + "\"";
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return InvalidArgument("api_url must be an http:// URL");
  }
  std::string_view rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find_first_of("/?#@ \\") != std::string_view::npos) {
    return InvalidArgument(what + " must be http://<host>:<port>, with no path or user info");
  }
  AdvertisedUrl out;
  std::string_view port;
  if (rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return InvalidArgument(what + ": unclosed [");
    out.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidArgument(what + ": expected :<port> after ]");
      port = after.substr(1);
      if (port.empty()) return InvalidArgument(what + ": empty port");
    }
    if (!ParseIp(out.host)) return InvalidArgument(what + ": [" + out.host + "] is not an address");
  } else {
    const size_t colon = rest.find(':');
    out.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = rest.substr(colon + 1);
      if (port.empty()) return InvalidArgument(what + ": empty port");
    }
    for (char c : out.host) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_';
      if (!ok) return InvalidArgument(what + ": the host may hold only [A-Za-z0-9._-]");
    }
    if (out.host.empty()) return InvalidArgument(what + " has no host");
  }
  if (!port.empty()) {
    auto p = ParseUint(port);
    if (!p || *p < 1 || *p > 65535) return InvalidArgument(what + ": the port must be 1-65535");
    out.port = static_cast<int>(*p);
  }
  return out;
}

NodeApiAddress TrustedNodeApiAddress(const AdvertisedUrl& advertised, std::string_view peer,
                                     const std::vector<IpNetwork>& networks) {
  const std::string port = ":" + std::to_string(advertised.port);
  const std::optional<IpBytes> host = ParseIp(advertised.host);
  const std::optional<IpBytes> from = ParseIp(peer);
  if (host && from && *host == *from) {
    return {"http://" + UrlHost(*host) + port, "advertised",
            "the advertised host is the heartbeat's source address"};
  }
  if (host) {
    for (const IpNetwork& n : networks) {
      if (NetworkContains(n, *host)) {
        return {"http://" + UrlHost(*host) + port, "api_networks",
                "the advertised host " + advertised.host + " lies in [nodes] api_networks (" +
                    n.text + ")"};
      }
    }
  }
  if (!from) {
    return {"", "none",
            "the advertised host " + advertised.host +
                " is not in [nodes] api_networks and the heartbeat's source address is unknown: "
                "the manager does not call this node"};
  }
  return {"http://" + UrlHost(*from) + port, "source_address",
          "the advertised host " + advertised.host +
              (host ? " is not the heartbeat's source address and not in [nodes] api_networks"
                    : " is a name, not an address in [nodes] api_networks") +
              ": the manager calls the source address " + UrlHost(*from) + " on the advertised port"};
}

}  // namespace flyt::cluster
