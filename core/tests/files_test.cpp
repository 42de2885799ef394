#include "core/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/timestamp.h"

namespace moe {
namespace {

TEST(Files, SecondWriterIsRefusedWhileTheFirstHoldsTheLock) {
  const auto path =
      std::filesystem::temp_directory_path() / ("writer_" + std::to_string(::getpid()) + ".lock");
  {
    FileLock first(path, FileLock::Mode::try_once);
    try {
      FileLock second(path, FileLock::Mode::try_once);
      FAIL() << "second writer got the lock";
    } catch (const LockError& e) {
      EXPECT_NE(std::string(e.what()).find("another writer holds"), std::string::npos);
    }
  }
  FileLock again(path, FileLock::Mode::try_once);  // released with the first
  std::filesystem::remove(path);
}

TEST(Files, Sha256MatchesKnownVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Files, AtomicWriteRemovesTemporariesOfKilledWritersOnly) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("atomic_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // A pid far above pid_max belongs to no process; our parent's pid is alive.
  const auto stale = dir / "t.csv.tmp.2147483600";
  const auto live = dir / ("t.csv.tmp." + std::to_string(::getppid()));
  write_file_atomic(stale, "old");
  write_file_atomic(live, "busy");
  write_file_atomic(dir / "t.csv", "new");
  EXPECT_EQ(read_file(dir / "t.csv"), "new");
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  // A target that cannot be replaced (a non-empty directory): the error names it, and no
  // temporary file is left behind.
  std::filesystem::create_directories(dir / "busy" / "inside");
  try {
    write_file_atomic(dir / "busy", "x");
    FAIL() << "replaced a directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot replace"), std::string::npos) << e.what();
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find("busy.tmp."), std::string::npos);
  // Nor is a directory read as an empty file.
  EXPECT_THROW((void)read_file(dir / "busy"), std::runtime_error);
  EXPECT_THROW((void)read_file(dir / "absent"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

// What a damaged file held, quoted in a message: valid UTF-8 stays, anything else is escaped, so
// the text prints as UTF-8 and nlohmann::json stores it (its dump throws on invalid UTF-8).
TEST(Files, PrintableTextKeepsValidUtf8AndEscapesEverythingElse) {
  EXPECT_EQ(printable_text("N = 4096, 1.5 \xc2\xb5s \xe2\x80\x94 ok\n\tnext"),
            "N = 4096, 1.5 \xc2\xb5s \xe2\x80\x94 ok\n\tnext");  // µ and — kept
  EXPECT_EQ(printable_text("last read: 'tr\xfa\x01'"), "last read: 'tr\\xfa\\x01'");
  EXPECT_EQ(printable_text(std::string("a\0b", 3)), "a\\x00b");
  // Overlong, surrogate, above U+10FFFF and truncated sequences are not UTF-8.
  EXPECT_EQ(printable_text("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable_text("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(printable_text("\xe2\x80"), "\\xe2\\x80");
  EXPECT_EQ(printable_text("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");  // U+1F600 kept
  // Every byte string becomes something JSON stores and gives back unchanged.
  std::mt19937 rng(20261205);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(rng() % 24, '\0');
    for (auto& b : bytes) b = static_cast<char>(rng() & 0xFF);
    const auto text = printable_text(bytes);
    std::string dumped;
    ASSERT_NO_THROW(dumped = nlohmann::json(text).dump()) << i;
    EXPECT_EQ(nlohmann::json::parse(dumped).get<std::string>(), text);
    EXPECT_EQ(printable_text(text), text);  // already printable: unchanged
  }
}

TEST(Files, PathComponentsStayInsideTheirRoot) {
  EXPECT_NO_THROW(require_path_component("qwen3-30b-a3b", "output.variant"));
  for (const std::string& bad : std::vector<std::string>{
           "", ".", "..", "../escape", "a/b", std::string(256, 'x'), std::string("a\0b", 3)}) {
    try {
      require_path_component(bad, "--variant");
      FAIL() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--variant"), std::string::npos) << e.what();
    }
  }
}

TEST(Files, CsvNumbersAreReadWholeAndFinite) {
  EXPECT_EQ(csv_integer("8192"), 8192);
  EXPECT_EQ(csv_integer("-3"), -3);
  EXPECT_EQ(csv_integer("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_DOUBLE_EQ(csv_real("190.4031"), 190.4031);
  EXPECT_DOUBLE_EQ(csv_real("1.5e-3"), 1.5e-3);
  EXPECT_DOUBLE_EQ(csv_real("12"), 12.0);
  const auto refusal = [](const std::function<void()>& parse) {
    try {
      parse();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // (Built with += : GCC 12 warns falsely, -Wrestrict, on "'" + field + "...".)
  const auto says = [](const std::string& field, const char* what) {
    std::string text = "'";
    text += printable_text(field);
    text += "' is ";
    text += what;
    return text;
  };
  for (const std::string bad : {"", "12abc", " 12", "12 ", "+12", "1e3", "1.0", "0x10", "12\r"})
    EXPECT_EQ(refusal([&] { (void)csv_integer(bad); }), says(bad, "not a whole number"));
  EXPECT_EQ(refusal([] { (void)csv_integer("9223372036854775808"); }),
            says("9223372036854775808", "out of range"));
  EXPECT_EQ(refusal([] { (void)csv_real("1e999"); }), says("1e999", "out of range"));
  for (const std::string bad : {"", "7.0us", "1,5", "+1.5", ".", "1e999x"})
    EXPECT_EQ(refusal([&] { (void)csv_real(bad); }), says(bad, "not a number")) << bad;
  for (const std::string bad : {"inf", "-inf", "nan"})
    EXPECT_EQ(refusal([&] { (void)csv_real(bad); }), says(bad, "not a finite number")) << bad;
}

TEST(Timestamps, ParseUtcReadsWhatUtcNowWritesAndNothingElse) {
  const auto now = std::time(nullptr);
  EXPECT_EQ(parse_utc(utc_string(now)), now);
  EXPECT_EQ(parse_utc("1970-01-01T00:01:40Z"), 100);
  EXPECT_FALSE(parse_utc("2026-12-01T00:00:00"));
  EXPECT_FALSE(parse_utc("2026-13-01T00:00:00Z"));
  EXPECT_FALSE(parse_utc("2026-12-01T00:00:00Zjunk"));
  EXPECT_FALSE(parse_utc(""));
}

}  // namespace
}  // namespace moe
