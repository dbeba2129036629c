#include "app/tree_entry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "storage/tree.h"

namespace fencegate::app {
namespace {

constexpr size_t kExamples = 3;

// A plan with the routes of the tree that key otherwise, and no key yet.
TreeEntryPlan EmptyPlan(const proxy::Router& router) {
  TreeEntryPlan plan;
  for (const proxy::Route& r : router.routes()) {
    if (proxy::KeysOtherThanPaths(r)) plan.other_keyed_routes.push_back(r.name);
  }
  return plan;
}

// Adds one stored key to the plan; false for the marker.
bool AddKey(const proxy::Router& router, const std::string& key, uint64_t token,
            TreeEntryPlan* plan) {
  if (key == storage::kTreeEnteredKey) {
    plan->entered_before = true;
    return false;
  }
  if (key.starts_with('\0')) return true;  // the lock service's counters and the like
  ++plan->keys;
  if (std::optional<std::string> path = proxy::TreePathOfKey(router, key)) {
    plan->paths.push_back(storage::TokenRecord{key, token, std::move(*path), {}});
  } else if (!plan->other_keyed_routes.empty()) {
    if (plan->unmapped_examples.size() < kExamples) plan->unmapped_examples.push_back(key);
    ++plan->unmapped;
  }
  return true;
}

}  // namespace

storage::Status PlanTreeEntry(const proxy::Router& router, const storage::StoreOptions& options,
                              bool stop_if_entered, TreeEntryPlan* plan) {
  *plan = EmptyPlan(router);
  storage::Status s = storage::ScanStore(options, [&](const std::string& key, uint64_t token) {
    return AddKey(router, key, token, plan) || !stop_if_entered;
  });
  if (s.code() == storage::Status::Code::kNotFound) return storage::Status::Ok();  // a new store
  return s;
}

TreeEntryPlan PlanFromRecords(const proxy::Router& router,
                              const std::vector<storage::TokenRecord>& records) {
  TreeEntryPlan plan = EmptyPlan(router);
  for (const storage::TokenRecord& r : records) {
    if (r.path.empty()) AddKey(router, r.key, r.token, &plan);
  }
  return plan;
}

std::string TreeEntryRefusal(const TreeEntryPlan& plan) {
  if (plan.unmapped == 0) return "";
  std::string routes;
  for (const std::string& r : plan.other_keyed_routes) {
    routes += (routes.empty() ? "'" : ", '") + r + "'";
  }
  std::string examples;
  for (const std::string& k : plan.unmapped_examples) {
    examples += (examples.empty() ? "'" : ", '") + storage::PrintableKey(k) + "'";
  }
  return std::to_string(plan.unmapped) + " stored keys (" + examples +
         (plan.unmapped > plan.unmapped_examples.size() ? ", ..." : "") +
         ") map back to no path, and route(s) " + routes +
         " fence writes under keys that are not their paths, so they may be theirs: the tree "
         "cannot hold the paths under them, and a subtree write above one would be decided as "
         "if it were not fenced. Either set `nesting: off` on those routes (the flat fence), "
         "or run `fencegate enter-tree --skip-unmapped` once with fencegate stopped to enter "
         "the " +
         std::to_string(plan.paths.size()) +
         " keys that do map and leave these outside the tree until each of their resources is "
         "written again";
}

storage::Status ApplyTreeEntry(storage::TokenStore& store, const TreeEntryPlan& plan, bool mark,
                               storage::ImportSummary* summary) {
  if (storage::Status s = storage::ImportTokens(store, plan.paths, summary); !s.ok()) return s;
  if (!mark) return storage::Status::Ok();
  storage::ImportSummary marker;
  return storage::ImportTokens(
      store, {storage::TokenRecord{std::string(storage::kTreeEnteredKey), 1, {}, {}}}, &marker);
}

storage::Status EnterTree(const proxy::Router& router, const storage::StoreOptions& options,
                          const TreeEntryMode& mode, TreeEntryResult* result) {
  *result = TreeEntryResult{};
  if (storage::Status s =
          PlanTreeEntry(router, options, /*stop_if_entered=*/!mode.force, &result->plan);
      !s.ok()) {
    return s;
  }
  if (result->plan.entered_before && !mode.force) return storage::Status::Ok();
  if (result->plan.keys == 0 && !result->plan.entered_before && !mode.mark_empty) {
    return storage::Status::Ok();
  }
  if (!mode.skip_unmapped) {
    result->refusal = TreeEntryRefusal(result->plan);
    if (!result->refusal.empty()) return storage::Status::Ok();
  }
  storage::Status status;
  std::unique_ptr<storage::TokenStore> store = storage::OpenStore(options, &status);
  if (!store) return status;
  storage::Status applied = ApplyTreeEntry(*store, result->plan, /*mark=*/true, &result->summary);
  storage::Status closed = store->Close();
  result->applied = applied.ok() && closed.ok();
  return applied.ok() ? closed : applied;
}

namespace {

// The log line of an entry that was made.
void LogEntered(const TreeEntryResult& entry) {
  if (!entry.applied || entry.plan.keys == 0) return;
  spdlog::info("entered {} of the store's {} keys into the tree of paths (the rest map back to "
               "no path of a route of the tree)",
               entry.summary.paths, entry.plan.keys);
}

}  // namespace

bool EnterTreeAtStart(const std::vector<config::RouteConfig>& routes,
                      const storage::StoreOptions& options, std::string* error) {
  std::string route_error;
  const std::unique_ptr<proxy::Router> router = proxy::Router::Build(routes, &route_error);
  if (!router) {
    *error = route_error;
    return false;
  }
  TreeEntryResult entry;
  if (storage::Status s = EnterTree(*router, options, TreeEntryMode{}, &entry); !s.ok()) {
    *error = "cannot open the token store (" + options.engine + " at " + options.path +
             "): " + s.ToString();
    return false;
  }
  if (!entry.refusal.empty()) {
    *error = "the token store at " + options.path +
             " cannot enter the tree of paths: " + entry.refusal;
    return false;
  }
  LogEntered(entry);
  return true;
}

TreeEntryBeside::TreeEntryBeside(const std::vector<config::RouteConfig>& routes,
                                 const storage::StoreOptions& options)
    : router_([&routes] {
        std::string error;
        return proxy::Router::Build(routes, &error);  // the configuration was checked
      }()),
      options_(options) {
  if (router_) thread_ = std::thread([this] { Run(); });
}

TreeEntryBeside::~TreeEntryBeside() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TreeEntryBeside::Run() {
  constexpr std::chrono::seconds kFirst{1};
  constexpr std::chrono::seconds kMost{30};
  constexpr std::chrono::seconds kAfterRefusal{60};
  std::chrono::seconds wait = kFirst;
  for (;;) {
    TreeEntryResult entry;
    const storage::Status s = EnterTree(*router_, options_, TreeEntryMode{}, &entry);
    std::chrono::seconds next = wait;
    if (s.ok() && entry.refusal.empty()) {
      LogEntered(entry);
      return;
    }
    if (s.ok()) {
      spdlog::error("the etcd prefix {} cannot enter the tree of paths: {}", options_.etcd.prefix,
                    entry.refusal);
      next = kAfterRefusal;
    } else {
      spdlog::warn("entering the etcd prefix {} into the tree of paths: {}; trying again in {} s",
                   options_.etcd.prefix, s.ToString(), wait.count());
      wait = std::min(wait * 2, kMost);
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, next, [this] { return stop_; })) return;
  }
}

}  // namespace fencegate::app
