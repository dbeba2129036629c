#pragma once
// Export and import of fences: the way to back up a token store or move it
// to another machine or engine.
//
// Format: JSON lines, one object per key, readable by people and scripts:
//   {"key":"/objects/a","token":34}
// then one per path of the tree of paths that a write targeted
// (docs/contract.md, "Nested resources"): the path, the key and token of
// its own writes, and the highest token of a subtree write to it when one
// was made:
//   {"path":"/objects/d","key":"/objects/d","token":34}
//   {"path":"/objects/d","key":"/objects/d","token":35,"subtree":35}
// A key or path that is not valid UTF-8 (keys may hold any byte, e.g. from
// a {header:Name} template) cannot be a JSON string; it is written as
//   {"key_hex":"2f6f626a...","token":34}
// (lower-case hex of the bytes; "path_hex" likewise). Import reads every
// form; blank lines are skipped. Export writes keys, then paths, each in
// byte order.
//
// Import only ever raises: each key record becomes TokenStore::Raise(key,
// token), each path record an administrative raise of the tree
// (TreeWrite::raise), so importing an old backup over a newer store
// changes nothing, and nothing is ever lowered. The tree's summaries of
// what lies below a path are not exported: the path records rebuild them.
// Input is parsed and validated completely before the first Raise: a bad
// line (its number in the error) applies nothing.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/status.h"
#include "storage/token_store.h"

namespace fencegate::storage {

class RocksDbStore;

struct TokenRecord {
  std::string key;
  uint64_t token = 0;
  // A path record when not empty: a canonical path of the tree, whose own
  // writes were under `key` with tokens up to `token`, and whose subtree
  // writes had tokens up to `subtree` when there was one.
  std::string path;
  std::optional<uint64_t> subtree;
};

// One line of the format, without the newline.
std::string FormatRecord(const TokenRecord& record);

// Parses one line. A blank line (only spaces/tabs/CR) sets *blank and is
// ok. Otherwise the line must be a JSON object with exactly "token" (an
// unsigned 64-bit integer) and one of "key" (string) or "key_hex"; keys are
// 1 to 1024 bytes. A path record has one of "path" and "path_hex" too (a
// path a tree write may target, tree.h IsTreePath), and may have
// "subtree" (an unsigned 64-bit integer). InvalidArgument says what is
// wrong (no line number).
Status ParseRecord(std::string_view line, TokenRecord* record, bool* blank);

// Reads every line of in. On the first bad line returns InvalidArgument
// "line N: ..." and leaves *records empty.
Status ReadRecords(std::istream& in, std::vector<TokenRecord>* records);

struct ExportSummary {
  uint64_t keys = 0;   // key records written, not counting the tree's marker (kTreeEnteredKey)
  uint64_t paths = 0;  // path records written
};

// Writes every key of store to out, one line each, then every path of its
// tree. Blocks on disk reads (RocksDbStore::ForEach, ForEachNode).
Status ExportTokens(RocksDbStore& store, std::ostream& out, ExportSummary* summary);

// Exports the engine that options name, as above. rocksdb: opens the data
// dir for reading and closes it; refuses (NotFound) a path that holds no
// token store instead of creating an empty one; Busy while another process
// (a running fencegate) holds the data dir. etcd: reads every token under
// the prefix page by page at one revision (etcd_export.h), while replicas
// keep running (the tree's nodes at the same revision); a value that is not
// a token or a node is Corruption naming its key.
Status ExportStore(const StoreOptions& options, std::ostream& out, ExportSummary* summary);

// Calls visit(key, token) for every token key of the store that options
// name, in byte order, as export reads them (a snapshot of the data dir,
// or every page of the etcd prefix at one revision); stops early (still
// ok) when visit returns false. Blocks on disk or network reads. rocksdb:
// NotFound for a path that holds no store, Busy while another process
// holds it.
Status ScanStore(const StoreOptions& options,
                 const std::function<bool(const std::string& key, uint64_t token)>& visit);

struct ImportSummary {
  uint64_t records = 0;         // records applied (Raise answered ok)
  uint64_t at_imported = 0;     // the key now holds exactly the imported token
  uint64_t already_higher = 0;  // the store already held a higher token
  uint64_t paths = 0;           // of the records applied, the path records
};

// Raises every key record in store (a bounded number in flight at once),
// then every path record, and blocks until each is answered; call it from
// a thread that is not a store handler. Stops issuing at the first error
// and returns it; records raised before it stay raised (harmless: tokens
// only go up), and summary->records says how many. An engine that keeps
// no tree answers a path record Unavailable.
Status ImportTokens(TokenStore& store, const std::vector<TokenRecord>& records,
                    ImportSummary* summary);

}  // namespace fencegate::storage
