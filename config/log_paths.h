#pragma once
// The log files the configuration names (log.file, log.access_log_file),
// checked after Load(), as the TLS files and secrets are, by a start and by
// --check: a file fencegate could not open is refused with its file, line
// and field before anything starts, not by a `critical` line later.

#include <string>

#include "config/config.h"

namespace fencegate::config {

// false and *error = "SOURCE:LINE: field 'log.file': ..." when a named log
// file's directory does not exist or is not writable (and the file is not
// already there to append to), the path is a directory, or the file exists
// and is not writable. Two access(2) calls a file; a relative path is
// relative to the working directory.
bool CheckLogFiles(const Config& config, std::string* error);

}  // namespace fencegate::config
