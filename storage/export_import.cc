#include "storage/export_import.h"

#include <condition_variable>
#include <functional>
#include <filesystem>
#include <memory>
#include <system_error>
#include <istream>
#include <mutex>
#include <ostream>
#include <utility>

#include <nlohmann/json.hpp>

#include "storage/etcd_export.h"
#include "storage/rocksdb_store.h"

namespace fencegate::storage {
namespace {

constexpr size_t kMaxKeyBytes = 1024;     // as RocksDbStore::kMaxKeyBytes
constexpr size_t kMaxInFlight = 1024;     // Raise calls outstanding at once
constexpr size_t kEtcdPageKeys = 1000;    // keys per range read of an etcd export

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xf];
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool FromHex(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = HexValue(hex[i]);
    int lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

namespace {

// Sets `name` to the bytes as a JSON string, or `name`_hex to their hex when
// they are not valid UTF-8.
void PutBytes(nlohmann::ordered_json* j, const std::string& name, const std::string& bytes) {
  nlohmann::ordered_json probe = bytes;
  try {
    (void)probe.dump();  // throws type_error 316 on invalid UTF-8
    (*j)[name] = bytes;
  } catch (const nlohmann::json::type_error&) {
    (*j)[name + "_hex"] = ToHex(bytes);
  }
}

// Reads the one of `name` and `name`_hex that j has into *out (false: it
// has neither); InvalidArgument when it has both or a malformed one.
Status GetBytes(const nlohmann::json& j, const std::string& name, std::string* out, bool* has) {
  const std::string hex = name + "_hex";
  const bool plain = j.contains(name);
  const bool hexed = j.contains(hex);
  *has = plain || hexed;
  if (plain && hexed) {
    return Status::InvalidArgument("needs one of \"" + name + "\" and \"" + hex + "\", not both");
  }
  if (plain) {
    if (!j[name].is_string()) return Status::InvalidArgument("\"" + name + "\" must be a string");
    *out = j[name].get<std::string>();
  } else if (hexed) {
    if (!j[hex].is_string() || !FromHex(j[hex].get<std::string>(), out)) {
      return Status::InvalidArgument("\"" + hex + "\" must be a string of hex digit pairs");
    }
  }
  return Status::Ok();
}

Status GetToken(const nlohmann::json& j, const std::string& name, uint64_t* out) {
  const nlohmann::json& t = j[name];
  if (t.is_number_unsigned()) {
    *out = t.get<uint64_t>();
    return Status::Ok();
  }
  if (t.is_number_integer()) {  // signed: only negatives land here
    return Status::InvalidArgument("\"" + name + "\" must not be negative");
  }
  return Status::InvalidArgument("\"" + name +
                                 "\" must be an integer from 0 to 18446744073709551615");
}

}  // namespace

std::string FormatRecord(const TokenRecord& record) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!record.path.empty()) PutBytes(&j, "path", record.path);
  PutBytes(&j, "key", record.key);
  j["token"] = record.token;
  if (record.subtree) j["subtree"] = *record.subtree;
  return j.dump();
}

Status ParseRecord(std::string_view line, TokenRecord* record, bool* blank) {
  *blank = IsBlank(line);
  if (*blank) return Status::Ok();
  nlohmann::json j = nlohmann::json::parse(line, nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::InvalidArgument("not valid JSON");
  }
  if (!j.is_object()) {
    return Status::InvalidArgument("expected a JSON object {\"key\":...,\"token\":...}");
  }
  for (const auto& [name, value] : j.items()) {
    if (name != "key" && name != "key_hex" && name != "token" && name != "path" &&
        name != "path_hex" && name != "subtree") {
      return Status::InvalidArgument("unknown field \"" + name + "\"");
    }
  }
  TokenRecord r;
  bool has_key = false;
  if (Status s = GetBytes(j, "key", &r.key, &has_key); !s.ok()) return s;
  if (!has_key) return Status::InvalidArgument("needs one of \"key\" and \"key_hex\"");
  if (r.key.empty() || r.key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key must be 1 to 1024 bytes, got " +
                                   std::to_string(r.key.size()));
  }
  // Refused here, not by the store halfway through an import.
  if (Status s = CheckTokenKey(r.key, kMaxKeyBytes); !s.ok()) return s;
  if (!j.contains("token")) {
    return Status::InvalidArgument("missing \"token\"");
  }
  if (Status s = GetToken(j, "token", &r.token); !s.ok()) return s;
  bool has_path = false;
  if (Status s = GetBytes(j, "path", &r.path, &has_path); !s.ok()) return s;
  if (has_path && !IsTreePath(r.path)) {
    return Status::InvalidArgument(
        "\"path\" must be a canonical path (\"/\" or \"/a/b\": no empty segment, no "
        "trailing slash) of at most " +
        std::to_string(kMaxTreeDepth) + " segments");
  }
  if (j.contains("subtree")) {
    if (!has_path) return Status::InvalidArgument("\"subtree\" belongs to a path record");
    uint64_t subtree = 0;
    if (Status s = GetToken(j, "subtree", &subtree); !s.ok()) return s;
    r.subtree = subtree;
  }
  *record = std::move(r);
  return Status::Ok();
}

Status ReadRecords(std::istream& in, std::vector<TokenRecord>* records) {
  records->clear();
  std::vector<TokenRecord> out;
  std::string line;
  uint64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    TokenRecord r;
    bool blank = false;
    if (Status s = ParseRecord(line, &r, &blank); !s.ok()) {
      return Status::InvalidArgument("line " + std::to_string(number) + ": " +
                                     s.message());
    }
    if (!blank) out.push_back(std::move(r));
  }
  if (in.bad()) {
    return Status::IoError("reading input failed after line " +
                           std::to_string(number));
  }
  *records = std::move(out);
  return Status::Ok();
}

namespace {

// Writes the tokens that `scan` visits, one line each, then the paths that
// `nodes` visits.
template <typename Scan, typename Nodes>
Status WriteRecords(const Scan& scan, const Nodes& nodes, std::ostream& out,
                    ExportSummary* summary) {
  *summary = ExportSummary{};
  Status s = scan([&](const std::string& key, uint64_t token) {
    out << FormatRecord(TokenRecord{key, token, {}, {}}) << '\n';
    if (!out) return false;
    if (key != kTreeEnteredKey) ++summary->keys;  // the store's own, not a fence
    return true;
  });
  if (!s.ok()) return s;
  Status shape;
  if (out) {
    s = nodes([&](const std::string& path, const TreeNode& node) {
      if (!node.fenced) return true;  // it sums up what lies below, and the paths below rebuild it
      if (node.key.empty()) {
        shape = Status::Corruption("the tree's node of path '" + path + "' has no key");
        return false;
      }
      TokenRecord r{node.key, node.token, path, {}};
      if (node.subtree_written) r.subtree = node.subtree;
      out << FormatRecord(r) << '\n';
      if (!out) return false;
      ++summary->paths;
      return true;
    });
    if (!s.ok()) return s;
    if (!shape.ok()) return shape;
  }
  out.flush();
  if (!out) return Status::IoError("writing the export failed (disk full?)");
  return Status::Ok();
}

Status ExportEtcd(const EtcdStoreSettings& settings, std::ostream& out, ExportSummary* summary) {
  std::unique_ptr<EtcdTransport> transport;
  if (Status s = OpenEtcdTransport(settings, &transport); !s.ok()) return s;
  int64_t revision = 0;  // the tokens' first page sets it; the tree is read at it too
  return WriteRecords(
      [&](const EtcdTokenVisitor& visit) {
        return ForEachEtcdToken(*transport, settings.prefix, kEtcdPageKeys, visit, &revision);
      },
      [&](const EtcdNodeVisitor& visit) {
        return ForEachEtcdNode(*transport, settings.prefix, kEtcdPageKeys, revision, visit);
      },
      out, summary);
}

}  // namespace

Status ExportTokens(RocksDbStore& store, std::ostream& out, ExportSummary* summary) {
  return WriteRecords(
      [&](const RocksDbStore::Visitor& visit) { return store.ForEach(visit); },
      [&](const RocksDbStore::NodeVisitor& visit) { return store.ForEachNode(visit); }, out,
      summary);
}

namespace {

// Opens the data dir that options name for a scan, refusing (NotFound) a
// path that holds no store instead of creating an empty one.
Status OpenForScan(const StoreOptions& options, std::unique_ptr<RocksDbStore>* store) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(options.path) / "CURRENT", ec)) {
    return Status::NotFound("no token store at " + options.path +
                            " (no CURRENT file" + (ec ? ": " + ec.message() : "") +
                            "); check storage.path");
  }
  RocksDbStoreOptions rocks;
  rocks.path = options.path;
  rocks.durability = options.durability;
  return RocksDbStore::Open(rocks, store);
}

Status CheckEngine(const StoreOptions& options) {
  if (options.engine == "etcd" || options.engine == "rocksdb") return Status::Ok();
  return Status::InvalidArgument("unknown storage engine \"" + options.engine +
                                 "\" (expected rocksdb or etcd)");
}

}  // namespace

Status ExportStore(const StoreOptions& options, std::ostream& out, ExportSummary* summary) {
  *summary = ExportSummary{};
  if (Status s = CheckEngine(options); !s.ok()) return s;
  if (options.engine == "etcd") return ExportEtcd(options.etcd, out, summary);
  std::unique_ptr<RocksDbStore> store;
  if (Status s = OpenForScan(options, &store); !s.ok()) return s;
  Status exported = ExportTokens(*store, out, summary);
  Status closed = store->Close();
  return exported.ok() ? closed : exported;
}

Status ScanStore(const StoreOptions& options,
                 const std::function<bool(const std::string& key, uint64_t token)>& visit) {
  if (Status s = CheckEngine(options); !s.ok()) return s;
  if (options.engine == "etcd") {
    std::unique_ptr<EtcdTransport> transport;
    if (Status s = OpenEtcdTransport(options.etcd, &transport); !s.ok()) return s;
    return ForEachEtcdToken(*transport, options.etcd.prefix, kEtcdPageKeys, visit);
  }
  std::unique_ptr<RocksDbStore> store;
  if (Status s = OpenForScan(options, &store); !s.ok()) return s;
  Status scanned = store->ForEach(visit);
  Status closed = store->Close();
  return scanned.ok() ? closed : scanned;
}

Status ImportTokens(TokenStore& store, const std::vector<TokenRecord>& records,
                    ImportSummary* summary) {
  *summary = ImportSummary{};
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0;  // guarded by mu
  Status first_error;    // guarded by mu
  ImportSummary done;    // guarded by mu

  // Waits for a place among the calls in flight; false after an error.
  auto take_place = [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return in_flight < kMaxInFlight; });
    if (!first_error.ok()) return false;
    ++in_flight;
    return true;
  };
  // Counts one answer (count runs under mu when it is ok) and frees its place.
  auto answered = [&](const Status& s, const std::function<void()>& count) {
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok()) {
      if (first_error.ok()) first_error = s;
    } else {
      count();
    }
    --in_flight;
    cv.notify_all();
  };

  for (const TokenRecord& r : records) {
    if (!r.path.empty()) continue;
    if (!take_place()) break;
    const uint64_t wanted = r.token;
    store.Raise(r.key, r.token, [&, wanted](const Status& s, Fence fence) {
      answered(s, [&] {
        ++done.records;
        ++(fence.current == wanted ? done.at_imported : done.already_higher);
      });
    });
  }
  // A path record: its own writes, then its subtree writes, each raised.
  for (const TokenRecord& r : records) {
    if (r.path.empty()) continue;
    for (int part = 0; part < (r.subtree ? 2 : 1); ++part) {
      if (!take_place()) break;
      TreeWrite write;
      write.keys = {r.key};
      write.token = part == 0 ? r.token : *r.subtree;
      write.targets = {TreeTarget{r.path, r.key, /*subtree=*/part == 1, Nesting::kPerKey}};
      write.raise = true;
      const bool last = part + 1 == (r.subtree ? 2 : 1);
      store.AdvanceTree(std::move(write), [&, last](const Status& s, const TreeVerdict&) {
        answered(s, [&] {
          if (!last) return;
          ++done.records;
          ++done.paths;
        });
      });
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  *summary = done;
  return first_error;
}

}  // namespace fencegate::storage
