// A test fixture with a fresh directory per test, named after the prefix, the run's seed and the
// test, and removed after it. Internal to store/tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>

namespace moe {

class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    const auto* unit = ::testing::UnitTest::GetInstance();
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + std::to_string(unit->random_seed()) +
                                                     "_" + unit->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace moe
