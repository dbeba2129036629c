// The root mapping: which key holds which section, the small sections read
// in place (admin, locks, forwarding), and the checks across sections.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "config/readers.h"
#include "config/routes.h"

namespace fencegate::config::internal {
namespace {

constexpr uint64_t kMaxThreads = 1024;

// Lines of the listen fields as found in the file (0 = default value).
struct ListenLines {
  int listen = 0;
  int admin = 0;
  int locks = 0;
};

// Two listeners on the same non-zero host:port cannot both bind.
bool CheckListenConflicts(YamlReader& r, const Config& c, const ListenLines& lines) {
  struct Listener {
    const char* path;
    std::optional<Endpoint> endpoint;
    int line;
  };
  const Listener listeners[] = {{"listen", c.endpoint, lines.listen},
                                {"admin.listen", c.admin.endpoint, lines.admin},
                                {"locks.listen", c.locks.endpoint, lines.locks}};
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i + 1; j < 3; ++j) {
      const auto& a = listeners[i];
      const auto& b = listeners[j];
      if (!a.endpoint || !b.endpoint || a.endpoint->port == 0 || !(*a.endpoint == *b.endpoint)) {
        continue;
      }
      const Listener& reported = b.line > 0 ? b : a;
      const Listener& other = b.line > 0 ? a : b;
      return r.Fail(Field{YAML::Node(), reported.path, reported.line},
                    "'" + reported.endpoint->ToString() + "' is also used by " + other.path,
                    "a distinct address for each listener, or port 0");
    }
  }
  return true;
}

// An environment variable's name as a shell can set it.
bool IsVariableName(std::string_view name) {
  auto letter = [](char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '_';
  };
  if (name.empty() || !letter(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char ch) { return letter(ch) || (ch >= '0' && ch <= '9'); });
}

// `admin:`; *listen_line is the line of admin.listen. The token comes from
// at most one of token, token_file and token_env (the file and the
// variable are read by ResolveSecrets()).
bool ReadAdmin(YamlReader& r, const Field& f, AdminConfig* admin, int* listen_line) {
  std::vector<Field> sources;  // token, token_file, token_env: those present
  bool ok = r.Map(f, Keys{
      {"listen", [&](const Field& l) {
         *listen_line = l.line;
         return r.Listen(l, true, &admin->listen, &admin->endpoint);
       }},
      {"token", [&](const Field& t) {
         sources.push_back(t);
         return r.String(t, &admin->token);
       }},
      {"token_file", [&](const Field& t) {
         sources.push_back(t);
         if (!r.NonEmptyString(t, "the path of a file holding the admin bearer token",
                               &admin->token_file.path)) {
           return false;
         }
         return FileInto(r, &admin->token_file)(t);
       }},
      {"token_env", [&](const Field& t) {
         sources.push_back(t);
         static constexpr std::string_view kExpected =
             "the name of an environment variable holding the admin bearer token, such as "
             "FENCEGATE_ADMIN_TOKEN";
         if (!r.NonEmptyString(t, kExpected, &admin->token_env)) return false;
         if (!IsVariableName(admin->token_env)) {
           return r.Fail(t, "'" + admin->token_env + "' is not an environment variable name",
                         kExpected);
         }
         admin->token_env_line = t.line;
         return true;
       }},
  });
  if (ok && sources.size() > 1) {
    const Field& first = sources[0];
    const std::string first_name = first.path.substr(first.path.rfind('.') + 1);
    return r.Fail(sources[1],
                  "conflicts with " + first_name + " on line " + std::to_string(first.line),
                  "at most one of token, token_file and token_env");
  }
  return ok;
}

}  // namespace

bool ReadRoot(YamlReader& r, const Field& root, Config* c) {
  ListenLines lines;
  bool has_upstream = false;
  bool ok = r.Map(root, Keys{
      {"listen", [&](const Field& v) {
         lines.listen = v.line;
         std::optional<Endpoint> endpoint;
         if (!r.Listen(v, false, &c->listen, &endpoint)) return false;
         c->endpoint = *endpoint;
         return true;
       }},
      {"tls", [&](const Field& v) { return ReadListenerTls(r, v, &c->tls); }},
      {"threads", [&](const Field& v) {
         uint64_t n = 0;
         if (!r.Unsigned(v, 0, kMaxThreads, &n)) return false;
         c->threads = static_cast<unsigned>(n);
         return true;
       }},
      {"upstream", [&](const Field& v) { return has_upstream = ReadUpstream(r, v, &c->upstream); }},
      {"fencing", [&](const Field& v) { return ReadFencing(r, v, &c->fencing); }},
      {"routes", [&](const Field& v) { return ReadRoutes(r, v, &c->routes); }},
      {"storage", [&](const Field& v) { return ReadStorage(r, v, &c->storage); }},
      {"admin", [&](const Field& v) { return ReadAdmin(r, v, &c->admin, &lines.admin); }},
      {"locks", [&](const Field& v) {
         return r.Map(v, Keys{
             {"listen", [&](const Field& l) {
                lines.locks = l.line;
                return r.Listen(l, true, &c->locks.listen, &c->locks.endpoint);
              }},
             {"max_ttl", DurationInto(r, &c->locks.max_ttl)},
         });
       }},
      {"limits", [&](const Field& v) { return ReadLimits(r, v, &c->limits); }},
      {"log", [&](const Field& v) { return ReadLog(r, v, &c->log); }},
      {"forwarding", [&](const Field& v) {
         return r.Map(v, Keys{
             {"trusted_hops", [&](const Field& h) {
                uint64_t n = 0;
                if (!r.Unsigned(h, 0, 64, &n)) return false;
                c->forwarding.trusted_hops = static_cast<uint32_t>(n);
                return true;
              }},
         });
       }},
  });
  if (!ok) return false;
  if (!has_upstream) {
    return r.Fail(Field{YAML::Node(), "upstream.url", root.line}, "is missing",
                  "an upstream section with the backend's URL, e.g. upstream: {url: "
                  "\"http://127.0.0.1:9000\"}");
  }
  return CheckListenConflicts(r, *c, lines);
}

// Endpoints derived from the documented default listen strings.
void DeriveDefaults(Config* c) {
  c->endpoint = *ParseEndpoint(c->listen);
  c->admin.endpoint = c->admin.listen.empty() ? std::nullopt : ParseEndpoint(c->admin.listen);
  c->locks.endpoint = c->locks.listen.empty() ? std::nullopt : ParseEndpoint(c->locks.listen);
}

}  // namespace fencegate::config::internal
