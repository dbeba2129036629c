#pragma once
// Export and import of fences: the way to back up a token store or move it
// to another machine or engine.
//
// Format: JSON lines, one object per key, readable by people and scripts:
//   {"key":"/objects/a","token":34}
// A key that is not valid UTF-8 (keys may hold any byte, e.g. from a
// {header:Name} template) cannot be a JSON string; it is written as
//   {"key_hex":"2f6f626a...","token":34}
// (lower-case hex of the key bytes). Import reads both forms; blank lines
// are skipped. Export writes keys in byte order.
//
// Import only ever raises: each record becomes TokenStore::Raise(key,
// token), so importing an old backup over a newer store changes nothing,
// and a key is never lowered. Input is parsed and validated completely
// before the first Raise: a bad line (its number in the error) applies
// nothing.

#include <cstdint>
#include <iosfwd>
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
};

// One line of the format, without the newline.
std::string FormatRecord(const TokenRecord& record);

// Parses one line. A blank line (only spaces/tabs/CR) sets *blank and is
// ok. Otherwise the line must be a JSON object with exactly "token" (an
// unsigned 64-bit integer) and one of "key" (string) or "key_hex"; keys are
// 1 to 1024 bytes. InvalidArgument says what is wrong (no line number).
Status ParseRecord(std::string_view line, TokenRecord* record, bool* blank);

// Reads every line of in. On the first bad line returns InvalidArgument
// "line N: ..." and leaves *records empty.
Status ReadRecords(std::istream& in, std::vector<TokenRecord>* records);

// Writes every key of store to out, one line each; *count = lines written.
// Blocks on disk reads (RocksDbStore::ForEach).
Status ExportTokens(RocksDbStore& store, std::ostream& out,
                    uint64_t* count);

// Exports the engine that options name, as above. rocksdb: opens the data
// dir for reading and closes it; refuses (NotFound) a path that holds no
// token store instead of creating an empty one; Busy while another process
// (a running fencegate) holds the data dir. etcd: reads every token under
// the prefix page by page at one revision (etcd_export.h), while replicas
// keep running; a value that is not a token is Corruption naming its key.
Status ExportStore(const StoreOptions& options, std::ostream& out,
                   uint64_t* count);

struct ImportSummary {
  uint64_t records = 0;         // records applied (Raise answered ok)
  uint64_t at_imported = 0;     // the key now holds exactly the imported token
  uint64_t already_higher = 0;  // the store already held a higher token
};

// Raises every record in store (a bounded number in flight at once) and
// blocks until each is answered; call it from a thread that is not a store
// handler. Stops issuing at the first error and returns it; records raised
// before it stay raised (harmless: tokens only go up), and
// summary->records says how many.
Status ImportTokens(TokenStore& store, const std::vector<TokenRecord>& records,
                    ImportSummary* summary);

}  // namespace fencegate::storage
