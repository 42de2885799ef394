#include "core/files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace moe {

namespace {

void fsync_path(const std::filesystem::path& p, int flags) {
  const int fd = ::open(p.c_str(), flags);
  if (fd < 0)
    throw std::runtime_error("cannot open " + p.string() + " for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("fsync " + p.string() + ": " + std::strerror(errno));
}

}  // namespace

FileLock::FileLock(const std::filesystem::path& path, Mode mode) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw LockError("cannot open lock file " + path.string() + ": " + std::strerror(errno));
  const int op = LOCK_EX | (mode == Mode::try_once ? LOCK_NB : 0);
  while (::flock(fd_, op) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw LockHeldError("another writer holds " + path.string() + "; wait for it to finish");
    throw LockError("cannot lock " + path.string() + ": " + std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

namespace {

// Removes `<path>.tmp.<pid>` files left by writers that were killed (their pid is gone); a live
// writer's temporary file is left alone.
void remove_stale_temporaries(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  const std::string prefix = name + ".tmp.";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0) continue;
    const auto digits = file.substr(prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stoll(digits));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
      std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, const std::string& bytes) {
  const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  remove_stale_temporaries(dir, path.filename().string());
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      throw std::runtime_error("cannot create " + tmp.string() + ": " + std::strerror(errno));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        std::filesystem::remove(tmp);
        throw std::runtime_error("write " + tmp.string() + ": " + std::strerror(err));
      }
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
      std::filesystem::remove(tmp);
      throw std::runtime_error("fsync " + tmp.string() + ": " + std::strerror(errno));
    }
  }
  std::error_code renamed;
  std::filesystem::rename(tmp, path, renamed);
  if (renamed) {
    std::filesystem::remove(tmp);
    throw std::runtime_error("cannot replace " + path.string() + ": " + renamed.message());
  }
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  // A directory opens and reads as empty on Linux: refused like a missing file.
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec))
    throw std::runtime_error("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

namespace {

// The whole of `field` parsed by from_chars into `value`, or an error quoting it.
template <class T>
T whole_field(const std::string& field, const char* what) {
  T value{};
  const char* end = field.data() + field.size();
  const auto [stop, error] = std::from_chars(field.data(), end, value);
  if (error == std::errc::result_out_of_range && stop == end)
    throw std::invalid_argument("'" + printable_text(field) + "' is out of range");
  if (field.empty() || error != std::errc() || stop != end)
    throw std::invalid_argument("'" + printable_text(field) + "' is not " + what);
  return value;
}

}  // namespace

std::int64_t csv_integer(const std::string& field) {
  return whole_field<std::int64_t>(field, "a whole number");
}

double csv_real(const std::string& field) {
  const double v = whole_field<double>(field, "a number");
  if (!std::isfinite(v))
    throw std::invalid_argument("'" + printable_text(field) + "' is not a finite number");
  return v;
}

std::vector<std::vector<std::string>> csv_data_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) rows.push_back(split_csv_line(line));
  return rows;
}

namespace {

// Length of the valid UTF-8 sequence of two or more bytes at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF)
    n = 2;
  else if (lead >= 0xE0 && lead <= 0xEF)
    n = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
  else if (lead >= 0xF0 && lead <= 0xF4)
    n = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string printable_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if ((c >= 0x20 && c < 0x7F) || c == '\n' || c == '\t') {
      out += static_cast<char>(c);
      ++i;
    } else if (const auto n = c >= 0x80 ? utf8_sequence(bytes, i) : 0; n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
      ++i;
    }
  }
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 computation failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

void require_path_component(const std::string& name, const std::string& field) {
  const char* why = name.empty()                           ? "is empty"
                    : name == "." || name == ".."          ? "names a directory above"
                    : name.find('/') != std::string::npos  ? "contains '/'"
                    : name.find('\0') != std::string::npos ? "contains a NUL byte"
                    : name.size() > 255                    ? "is longer than 255 bytes"
                                                           : nullptr;
  if (why)
    throw std::invalid_argument(field + " '" + name + "' " + why +
                                "; it must be one path component inside its root");
}

}  // namespace moe
