#pragma once
// Entering a store's paths into the tree of paths (docs/contract.md,
// "Nested resources"). A store written before the tree came (a data
// directory or an etcd prefix of an older fencegate, or one filled by
// importing keys without their paths) holds keys but no nodes: a subtree
// write above such a path would be decided as if it were not fenced.
//
// fencegate enters them at start, once per store (a marker key,
// storage::kTreeEnteredKey, says it is done), and `fencegate enter-tree`
// does it on demand: every key that a route of the tree fences under the
// path itself (`key: "{path}"`, the default) becomes that path's node with
// the key's token, as an administrative raise (nothing is lowered, no
// token is lost). A key that maps back to no path is left out; when a
// route of the tree keys its writes otherwise (`tenant/{1}`, a header),
// such a key may be one of its, and the entry is refused with advice
// instead.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "config/config.h"
#include "fence/router.h"
#include "storage/export_import.h"
#include "storage/status.h"
#include "storage/token_store.h"

namespace fencegate::app {

struct TreeEntryPlan {
  bool entered_before = false;  // the store's marker says the entry was made
  uint64_t keys = 0;            // keys read
  std::vector<storage::TokenRecord> paths;  // the path records to raise
  // Keys that map back to no path while a route of the tree keys writes
  // otherwise: how many, and the first few.
  uint64_t unmapped = 0;
  std::vector<std::string> unmapped_examples;
  std::vector<std::string> other_keyed_routes;  // those routes, by name
};

// Reads every key of the store that `options` names, before it opens for
// serving (it blocks on disk or network reads), and plans the entry.
// stop_if_entered: stop at the marker when the store has it (the start's
// check, which then reads one key). A store that does not exist yet is
// empty.
storage::Status PlanTreeEntry(const proxy::Router& router, const storage::StoreOptions& options,
                              bool stop_if_entered, TreeEntryPlan* plan);

// The plan for the key records of an import file (its path records are
// the tree already): entered_before when the file holds the marker.
TreeEntryPlan PlanFromRecords(const proxy::Router& router,
                              const std::vector<storage::TokenRecord>& records);

// Why the plan may not be applied as it is, with what to do (naming the
// routes and a few keys); "" when it may.
std::string TreeEntryRefusal(const TreeEntryPlan& plan);

// Raises the plan's paths into the store, then (mark) its marker; blocks
// until each is answered (call it from a thread that is not a store
// handler).
storage::Status ApplyTreeEntry(storage::TokenStore& store, const TreeEntryPlan& plan, bool mark,
                               storage::ImportSummary* summary);

struct TreeEntryResult {
  TreeEntryPlan plan;
  bool applied = false;          // the store was opened and the plan raised into it
  std::string refusal;           // TreeEntryRefusal's, when that stopped it
  storage::ImportSummary summary;
};

struct TreeEntryMode {
  bool force = false;          // even when the store's marker says it was made
  bool skip_unmapped = false;  // enter what maps although TreeEntryRefusal refuses
  // A store without keys gets its marker (a start: the tree is kept from
  // now on); false leaves it as it is (an import into it brings its own).
  bool mark_empty = true;
};

// The whole entry, for the start, for `fencegate import` and for `fencegate
// enter-tree`: plans it, refuses as TreeEntryRefusal says unless told to
// skip, and otherwise opens the store, applies the plan and closes it again
// (so that the store a server then opens counts only its own requests). Ok
// with a refusal when refused; an error when the store cannot be read or
// written.
storage::Status EnterTree(const proxy::Router& router, const storage::StoreOptions& options,
                          const TreeEntryMode& mode, TreeEntryResult* result);

// The entry at the start of the embedded store, before it opens for
// serving, logged; false + *error (a message naming the store) when the
// store cannot be read or the entry is refused: fencegate does not start.
bool EnterTreeAtStart(const std::vector<config::RouteConfig>& routes,
                      const storage::StoreOptions& options, std::string* error);

// The entry at the start of an etcd replica, on a thread beside it: etcd
// may be down or refuse the replica's user while it starts, and the
// replica serves anyway (fenced writes then fail closed). Tries until the
// entry is made (a second after a failure, doubling to half a minute; a
// refusal is logged as an error and tried again each minute); stops when
// destroyed.
class TreeEntryBeside {
 public:
  TreeEntryBeside(const std::vector<config::RouteConfig>& routes,
                  const storage::StoreOptions& options);
  ~TreeEntryBeside();
  TreeEntryBeside(const TreeEntryBeside&) = delete;
  TreeEntryBeside& operator=(const TreeEntryBeside&) = delete;

 private:
  void Run();

  std::unique_ptr<proxy::Router> router_;
  storage::StoreOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace fencegate::app
