#pragma once
// A plain model of the tree rule (docs/contract.md, "Nested resources") and
// a random workload over a small tree, for the property tests of DecideTree
// (tests/storage/tree_test.cc) and of every engine's AdvanceTree
// (tests/storage/token_store_contract_test.cc).

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "storage/tree.h"

namespace fencegate::storage::testing {

struct Accepted {
  std::string path;
  std::string key;
  uint64_t token;
  bool subtree;
};

inline bool Below(const std::string& q, const std::string& p) {  // q strictly below p
  if (p == "/") return q != "/";
  return q.size() > p.size() && q.compare(0, p.size(), p) == 0 && q[p.size()] == '/';
}

struct ModelFlaws {
  bool no_ancestor_check = false;  // shared: subtree writes above are not compared
  bool no_subtree_check = false;   // shared: what is below a subtree write is not compared
};

// The rule of docs/contract.md, "Nested resources", as plainly as it reads,
// over every write accepted so far.
class Model {
  using K = TreeVerdict::Kind;

 public:
  explicit Model(ModelFlaws flaws = {}) : flaws_(flaws) {}

  K Decide(const TreeWrite& w) {
    for (const std::string& k : w.keys) {
      if (auto it = keys_.find(k); it != keys_.end() && w.token < it->second) return K::kStaleKey;
    }
    for (const TreeTarget& t : w.targets) {
      for (const Accepted& a : accepted_) {
        switch (t.nesting) {
          case Nesting::kUncovered:
            if (a.path == t.path || Below(a.path, t.path)) return K::kNestedKeys;
            break;
          case Nesting::kPerKey:
            if (t.subtree && Below(a.path, t.path) && a.key != t.key) return K::kNestedKeys;
            break;
          case Nesting::kShared:
            // Every accepted write that changed a resource this one changes.
            if (a.token <= w.token) break;
            if (a.path == t.path) return K::kStaleTree;
            if (!flaws_.no_ancestor_check && a.subtree && Below(t.path, a.path)) {
              return K::kStaleTree;
            }
            if (!flaws_.no_subtree_check && t.subtree && Below(a.path, t.path)) {
              return K::kStaleTree;
            }
            break;
        }
      }
    }
    for (const std::string& k : w.keys) keys_[k] = std::max(keys_[k], w.token);
    for (const TreeTarget& t : w.targets) {
      if (t.nesting != Nesting::kUncovered) {
        accepted_.push_back({t.path, t.key, w.token, t.subtree});
      }
    }
    return K::kAccepted;
  }

 private:
  ModelFlaws flaws_;
  std::map<std::string, uint64_t> keys_;
  std::vector<Accepted> accepted_;
};

// Random writes over a small tree: segments a, b, c up to depth 4. The top
// segment picks the "route": /a per_key keyed by path, /b per_key keyed by
// its second segment (a templated key: descendants share it), /c shared,
// the root and /x uncovered. Each write has one target, or two (a MOVE or
// COPY); tokens come from a small range so that they often tie.
class Workload {
 public:
  explicit Workload(uint32_t seed) : rng_(seed) {}

  TreeWrite Next() {
    TreeWrite w;
    w.token = Pick(12);
    const size_t n = Pick(4) == 0 ? 2 : 1;
    for (size_t i = 0; i < n; ++i) {
      TreeTarget t;
      t.path = Path();
      // The second target of a COPY is its Destination, a subtree target;
      // the first (the source) is one only for a MOVE.
      t.subtree = Pick(3) != 0;
      const char top = t.path.size() > 1 ? t.path[1] : '/';
      if (top == 'a') {
        t.nesting = Nesting::kPerKey;
        t.key = t.path;
      } else if (top == 'b') {
        t.nesting = Nesting::kPerKey;
        t.key = t.path.size() > 3 ? "b" + t.path.substr(2, 2) : "b";
      } else if (top == 'c') {
        t.nesting = Nesting::kShared;
        t.key = t.path;
      } else {
        t.nesting = Nesting::kUncovered;
        t.subtree = true;  // only subtree writes outside every route are tree writes
      }
      if (std::any_of(w.targets.begin(), w.targets.end(),
                      [&t](const TreeTarget& o) { return o.path == t.path; })) {
        continue;
      }
      if (!t.key.empty() && std::find(w.keys.begin(), w.keys.end(), t.key) == w.keys.end()) {
        w.keys.push_back(t.key);
      }
      w.targets.push_back(std::move(t));
    }
    return w;
  }

 private:
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  std::string Path() {
    const size_t depth = Pick(5);
    if (depth == 0) return "/";
    static const char* kTop[] = {"a", "b", "c", "x"};
    std::string p = std::string("/") + kTop[Pick(4)];
    for (size_t i = 1; i < depth; ++i) p += std::string("/") + "abc"[Pick(3)];
    return p;
  }
  std::mt19937 rng_;
};

}  // namespace fencegate::storage::testing
