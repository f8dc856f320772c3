// output_path.h: output paths (--json, --junit, --out, -o) are checked before
// anything runs, so an unwritable report is exit 2 up front instead of a failure
// after a long run. The check leaves no trace: a probe file it made is removed.
#pragma once
#include <string>

namespace pb {

// A file the run will write: its directory exists and is writable, or can be
// made (its nearest existing ancestor is a writable directory); the path is not
// a directory or a FIFO, and an existing file opens for writing (append, so
// nothing is truncated). Throws InputError "FLAG PATH: why".
void check_output_file(const std::string& path, const std::string& flag);

// A directory the run will fill (sweep --out): it is a writable directory, or can
// be made. Throws InputError "FLAG PATH: why".
void check_output_dir(const std::string& path, const std::string& flag);

}  // namespace pb
