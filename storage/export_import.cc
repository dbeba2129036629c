#include "storage/export_import.h"

#include <condition_variable>
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

std::string FormatRecord(const TokenRecord& record) {
  nlohmann::ordered_json j;
  j["key"] = record.key;
  j["token"] = record.token;
  try {
    return j.dump();  // throws type_error 316 on invalid UTF-8
  } catch (const nlohmann::json::type_error&) {
    nlohmann::ordered_json h;
    h["key_hex"] = ToHex(record.key);
    h["token"] = record.token;
    return h.dump();
  }
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
    if (name != "key" && name != "key_hex" && name != "token") {
      return Status::InvalidArgument("unknown field \"" + name + "\"");
    }
  }
  bool has_key = j.contains("key");
  bool has_hex = j.contains("key_hex");
  if (has_key == has_hex) {
    return Status::InvalidArgument("needs exactly one of \"key\" and \"key_hex\"");
  }
  TokenRecord r;
  if (has_key) {
    if (!j["key"].is_string()) {
      return Status::InvalidArgument("\"key\" must be a string");
    }
    r.key = j["key"].get<std::string>();
  } else {
    if (!j["key_hex"].is_string() ||
        !FromHex(j["key_hex"].get<std::string>(), &r.key)) {
      return Status::InvalidArgument("\"key_hex\" must be a string of hex digit pairs");
    }
  }
  if (r.key.empty() || r.key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key must be 1 to 1024 bytes, got " +
                                   std::to_string(r.key.size()));
  }
  if (!j.contains("token")) {
    return Status::InvalidArgument("missing \"token\"");
  }
  const nlohmann::json& t = j["token"];
  if (t.is_number_unsigned()) {
    r.token = t.get<uint64_t>();
  } else if (t.is_number_integer()) {  // signed: only negatives land here
    return Status::InvalidArgument("\"token\" must not be negative");
  } else {
    return Status::InvalidArgument(
        "\"token\" must be an integer from 0 to 18446744073709551615");
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

// Writes the tokens that `scan` visits, one line each.
template <typename Scan>
Status WriteTokens(const Scan& scan, std::ostream& out, uint64_t* count) {
  *count = 0;
  Status s = scan([&](const std::string& key, uint64_t token) {
    out << FormatRecord(TokenRecord{key, token}) << '\n';
    if (!out) return false;
    ++*count;
    return true;
  });
  if (!s.ok()) return s;
  out.flush();
  if (!out) return Status::IoError("writing the export failed (disk full?)");
  return Status::Ok();
}

Status ExportEtcd(const EtcdStoreSettings& settings, std::ostream& out, uint64_t* count) {
  std::unique_ptr<EtcdTransport> transport;
  if (Status s = OpenEtcdTransport(settings, &transport); !s.ok()) return s;
  return WriteTokens(
      [&](const EtcdTokenVisitor& visit) {
        return ForEachEtcdToken(*transport, settings.prefix, kEtcdPageKeys, visit);
      },
      out, count);
}

}  // namespace

Status ExportTokens(RocksDbStore& store, std::ostream& out,
                    uint64_t* count) {
  return WriteTokens([&](const RocksDbStore::Visitor& visit) { return store.ForEach(visit); },
                     out, count);
}

Status ExportStore(const StoreOptions& options, std::ostream& out,
                   uint64_t* count) {
  *count = 0;
  if (options.engine == "etcd") return ExportEtcd(options.etcd, out, count);
  if (options.engine != "rocksdb") {
    return Status::InvalidArgument("unknown storage engine \"" + options.engine +
                                   "\" (expected rocksdb or etcd)");
  }
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(options.path) / "CURRENT", ec)) {
    return Status::NotFound("no token store at " + options.path +
                            " (no CURRENT file" + (ec ? ": " + ec.message() : "") +
                            "); check storage.path");
  }
  RocksDbStoreOptions rocks;
  rocks.path = options.path;
  rocks.durability = options.durability;
  std::unique_ptr<RocksDbStore> store;
  if (Status s = RocksDbStore::Open(rocks, &store); !s.ok()) return s;
  Status exported = ExportTokens(*store, out, count);
  Status closed = store->Close();
  return exported.ok() ? closed : exported;
}

Status ImportTokens(TokenStore& store, const std::vector<TokenRecord>& records,
                    ImportSummary* summary) {
  *summary = ImportSummary{};
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0;  // guarded by mu
  Status first_error;    // guarded by mu
  ImportSummary done;    // guarded by mu

  for (const TokenRecord& r : records) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return in_flight < kMaxInFlight; });
      if (!first_error.ok()) break;
      ++in_flight;
    }
    uint64_t wanted = r.token;
    store.Raise(r.key, r.token, [&, wanted](const Status& s, Fence fence) {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok()) {
        if (first_error.ok()) first_error = s;
      } else {
        ++done.records;
        if (fence.current == wanted) {
          ++done.at_imported;
        } else {
          ++done.already_higher;
        }
      }
      --in_flight;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  *summary = done;
  return first_error;
}

}  // namespace fencegate::storage
