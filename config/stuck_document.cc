// A workaround for yaml-cpp 0.7: finding the document YAML::LoadAll would
// never return from, before LoadAll is called.

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <sstream>
#include <string>

#include "config/readers.h"

namespace fencegate::config::internal {
namespace {

// Walks the documents of `yaml` without building them. yaml-cpp 0.7's
// YAML::LoadAll never returns on a token that cannot start a node, such as a
// stray ',': it emits the same empty document again and again, allocating
// until the process is killed (https://github.com/jbeder/yaml-cpp/issues/1040,
// fixed in 0.8). Such a document starts where the previous one did; returns
// its mark, or nullopt when every document moves on. Throws YAML::Exception
// on syntax errors.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> stuck;
  std::optional<YAML::Mark> last;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (last && last->pos == mark.pos) stuck = mark;
    last = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::optional<YAML::Mark> StuckDocument(const std::string& yaml) {
  std::istringstream in(yaml);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (!starts.stuck && parser.HandleNextDocument(starts)) {
  }
  return starts.stuck;
}

}  // namespace fencegate::config::internal
