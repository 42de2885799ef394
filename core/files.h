// Durable file updates and advisory locks (docs/bundle-format.md): files are written to a temporary
// name, fsynced, renamed over the target and the directory fsynced; locks are flock(2) on lock
// files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

class LockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Another process holds the lock (as opposed to a lock file that cannot be opened).
class LockHeldError : public LockError {
 public:
  using LockError::LockError;
};

// Exclusive flock on `path` (created if missing) held for the object's lifetime.
class FileLock {
 public:
  enum class Mode { wait, try_once };
  FileLock(const std::filesystem::path& path, Mode mode);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Writes `bytes` to `path` atomically and durably.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

[[nodiscard]] std::string read_file(const std::filesystem::path& path);

// Fields of one line of our CSV tables (no quoting; a trailing comma is an empty last field).
[[nodiscard]] std::vector<std::string> split_csv_line(const std::string& line);
// The fields of every line after the header of a CSV text.
[[nodiscard]] std::vector<std::vector<std::string>> csv_data_rows(const std::string& text);
// One field of those tables as a number: the whole field is the number (no blank, sign '+' or
// trailing text: "12abc" is not 12), and a real number is finite. Throws std::invalid_argument
// quoting the field. A table a simulator reads must not answer from a number it half read.
[[nodiscard]] std::int64_t csv_integer(const std::string& field);
[[nodiscard]] double csv_real(const std::string& field);

// Throws std::invalid_argument naming `field` unless `name` is one path component that stays in
// its directory: not empty, not "." or "..", no '/' or NUL, at most 255 bytes.
void require_path_component(const std::string& name, const std::string& field);

// `bytes` as text that is safe to print or to store in JSON: valid UTF-8 sequences, tab and
// newline kept, every other control character and every byte that is not valid UTF-8 written as
// \xNN. For messages that quote what a damaged file held (a JSON parser's "last read: ..."):
// raw bytes there made a log undecodable and would make nlohmann::json::dump throw.
[[nodiscard]] std::string printable_text(std::string_view bytes);

// SHA-256 (lowercase hex) of a byte string.
[[nodiscard]] std::string sha256_hex(const std::string& bytes);

}  // namespace moe
