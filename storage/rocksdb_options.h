#pragma once
// Private to the RocksDB engine: the options it opens RocksDB with.

#include <rocksdb/options.h>

#include "storage/rocksdb_store.h"

namespace fencegate::storage::rocksdb_support {

// RocksDB's options for the store that `options` describe: created if
// missing, paranoid checks, a damaged record refused unless it is the WAL's
// last (kTolerateCorruptedTailRecords), RocksDB's automatic error recovery
// off (the store's writer recovers: one recovery mechanism), memory bounded
// whatever the number of keys, rewrites of a key in place in a memtable
// hashed on the whole key (memtable_buckets; 0 = RocksDB's skiplist), and
// bloom filters with the table files. options.env, when set, is used.
rocksdb::Options MakeOptions(const RocksDbStoreOptions& options);

}  // namespace fencegate::storage::rocksdb_support
